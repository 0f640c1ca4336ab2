// `specstack bench ttft`: full-prefill vs speculative-prefill time to first
// token over prompt lengths and keep fractions, with the cost-model fit
// (ALGORITHM.md "Cost model"). Registered under the `bench` group.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace specstack::cli {

// Adds `ttft` to the `bench` group; the returned function runs it.
std::function<int()> add_bench_ttft_command(CLI::App& bench);

}  // namespace specstack::cli

// `specstack bench spec`: speculative vs plain decoding tokens/s over batch
// sizes, context lengths, k and (emulated or real) acceptance, beside the
// throughput model's prediction. Registered under the `bench` group.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace specstack::cli {

// Adds `spec` to the `bench` group; the returned function runs it.
std::function<int()> add_bench_spec_command(CLI::App& bench);

}  // namespace specstack::cli

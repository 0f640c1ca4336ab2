// specstack bench soak: a long mixed load against a live server (any
// `specstack serve`, CPU or GPU: it speaks only HTTP), with the server's
// memory and KV pool read from /metrics along the way. Exits non-zero on any
// 5xx, wrong response or KV block still held at the end, so a short run is a
// test.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace specstack::cli {

std::function<int()> add_bench_soak_command(CLI::App& bench);

}  // namespace specstack::cli

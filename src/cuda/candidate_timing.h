// Timing alternatives of one operation on a stream, for the GEMM algorithm
// choices (Fp8Gemm::autotune, Bf16GemmTuner).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace specstack::cuda {

// Runs alternative i of `count` with run(i) (true: it launched). Each runs
// once as a warm-up (one whose call fails is out: ok[i] false), then `rounds`
// rounds run every remaining alternative once each, timed with CUDA events,
// so a drift of the clocks (the H100 slows as it warms under load) spreads
// over all of them rather than favouring whichever ran first. Returns each
// alternative's median round in microseconds (0 where !ok[i]). Synchronizes
// the stream; never call it inside a graph capture.
std::vector<float> time_candidates(cudaStream_t stream, size_t count,
                                   const std::function<bool(size_t)>& run, std::vector<bool>& ok,
                                   int rounds = 5);

}  // namespace specstack::cuda

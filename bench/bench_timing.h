// Timing one call for the bench programs that time a kernel or library call
// at several shapes (attention_bench, gemm_algo_bench, fp8_bench, gemv_bench):
// warm-up calls, then batches of calls between two CUDA events on a stream;
// the median batch's microseconds per call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "cuda/cuda_check.h"

namespace specstack::bench {

template <typename Call>
double median_us_per_call(Call call, int calls_per_batch, int batches, int warmup = 3,
                          cudaStream_t stream = nullptr) {
  for (int i = 0; i < warmup; ++i) call();
  cudaEvent_t start, stop;
  SS_CUDA_CHECK(cudaEventCreate(&start));
  SS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<double> per_call;
  for (int b = 0; b < batches; ++b) {
    SS_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < calls_per_batch; ++i) call();
    SS_CUDA_CHECK(cudaEventRecord(stop, stream));
    SS_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    SS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    per_call.push_back(1000.0 * ms / calls_per_batch);
  }
  SS_CUDA_CHECK(cudaEventDestroy(start));
  SS_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

// The same for call(c) over `copies` copies of the operands in turn (as many
// as it takes to exceed the L2, so every call streams from DRAM): 5 warm-up
// calls, 7 batches.
template <typename Call>
double median_us_rotating(int copies, Call call, int calls_per_batch, cudaStream_t stream) {
  int next = 0;
  return median_us_per_call([&] { call(next++ % copies); }, calls_per_batch, 7, 5, stream);
}

}  // namespace specstack::bench

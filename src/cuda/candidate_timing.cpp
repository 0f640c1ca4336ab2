// time_candidates (candidate_timing.h).
#include "cuda/candidate_timing.h"

#include <algorithm>

#include "cuda/cuda_check.h"

namespace specstack::cuda {

std::vector<float> time_candidates(cudaStream_t stream, size_t count,
                                   const std::function<bool(size_t)>& run, std::vector<bool>& ok,
                                   int rounds) {
  ok.assign(count, true);
  for (size_t i = 0; i < count; ++i) ok[i] = run(i);  // warm-up
  std::vector<cudaEvent_t> events(2 * count * size_t(rounds));
  for (auto& e : events) SS_CUDA_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < count; ++i) {
      if (!ok[i]) continue;
      SS_CUDA_CHECK(cudaEventRecord(events[2 * (r * count + i)], stream));
      ok[i] = run(i);
      SS_CUDA_CHECK(cudaEventRecord(events[2 * (r * count + i) + 1], stream));
    }
  }
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> median(count, 0.0f);
  for (size_t i = 0; i < count; ++i) {
    if (!ok[i]) continue;
    std::vector<float> us(static_cast<size_t>(rounds));
    for (int r = 0; r < rounds; ++r) {
      float ms = 0.0f;
      SS_CUDA_CHECK(
          cudaEventElapsedTime(&ms, events[2 * (r * count + i)], events[2 * (r * count + i) + 1]));
      us[size_t(r)] = 1000.0f * ms;
    }
    std::sort(us.begin(), us.end());
    median[i] = us[size_t(rounds) / 2];
  }
  for (auto& e : events) SS_CUDA_CHECK(cudaEventDestroy(e));
  return median;
}

}  // namespace specstack::cuda

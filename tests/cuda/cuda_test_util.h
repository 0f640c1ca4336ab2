// Helpers for the CUDA twin tests: skip without a GPU, seeded random bf16
// data, relative error. Every test draws fresh random inputs, poisons its
// outputs (0xFF bytes = NaN) and compares ||gpu - cpu|| / ||cpu||.
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"

namespace specstack::cuda::testing {

#define SS_REQUIRE_GPU()                                                               \
  do {                                                                                 \
    if (!::specstack::cuda::cuda_device_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// bf16 tolerance for ||gpu - cpu|| / ||cpu|| where both sides start from the
// same bf16-rounded inputs (bf16 outputs add ~2^-9 relative rounding).
constexpr double kBf16Tolerance = 1e-2;

inline float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

// n values uniform in [lo, hi), rounded to bf16 so both sides see the same inputs.
inline std::vector<float> random_values(std::mt19937& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (auto& v : out) v = round_bf16(dist(rng));
  return out;
}

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}

inline std::vector<float> to_f32(const std::vector<__nv_bfloat16>& values) {
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __bfloat162float(values[i]);
  return out;
}

// ||a - b|| / ||b||; infinity when any value of `a` is not finite.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> buffer(host.size());
  buffer.upload(host);
  return buffer;
}

}  // namespace specstack::cuda::testing

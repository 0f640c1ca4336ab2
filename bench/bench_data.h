// Operand data for the bench programs that time kernels on random weights
// (fp8_bench, gemv_bench).
#pragma once

#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "cuda/device_buffer.h"

namespace specstack::bench {

// Small random values, uniform in [-0.05, 0.05), drawn on the host.
inline void fill_random_bf16(cuda::DeviceBuffer<__nv_bfloat16>& buf, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  std::vector<__nv_bfloat16> host(buf.size());
  for (auto& v : host) v = __float2bfloat16(dist(rng));
  buf.upload(host);
}

}  // namespace specstack::bench

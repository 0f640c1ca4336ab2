// Device-side pieces of the e4m3 row quantizer and of the FP8 GEMM's
// dequantizing epilogue, shared by every kernel that quantizes a row or
// applies the scales (fp8_quantize.cu, norm_quantize_fp8.cu, rope_kv.cu), so
// a fused kernel is bit-identical to the separate passes it replaces.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/fp8_quantize.h"

namespace specstack::cuda {

// Folds the |x| of 8 bf16 (one 16-byte vector) into a running amax.
__device__ inline float fp8_amax8(const uint4& packed, float amax) {
  const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(x2[i]);
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
  return amax;
}

// The row's scale (amax / 448; 1 for an all-zero row) and the factor x ->
// e4m3 (448 / amax). IEEE division (this build has no fast math), so the CPU
// twin computes the same factor bit for bit.
__device__ inline float fp8_row_scale(float amax) {
  return amax > 0.0f ? amax / kFp8E4m3Max : 1.0f;
}
__device__ inline float fp8_row_factor(float amax) {
  return amax > 0.0f ? kFp8E4m3Max / amax : 1.0f;
}

// Two floats times inv to two e4m3 bytes: round to nearest even, saturating
// to ±448 (x * inv can exceed 448 by rounding only in its last bit).
__device__ inline __nv_fp8x2_storage_t fp8_pair(float a, float b, float inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a * inv, b * inv), __NV_SATFINITE, __NV_E4M3);
}

// 8 bf16 times inv to 8 e4m3 bytes.
__device__ inline uint2 fp8_to_e4m3x8(const uint4& packed, float inv) {
  const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&packed);
  uint2 out;
  auto* o2 = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(x2[i]);
    o2[i] = fp8_pair(f.x, f.y, inv);
  }
  return out;
}

// One element of an unscaled FP8 GEMM output y, dequantized:
// y * (row_scale * col_scale) (+ bias), each step rounded on its own (the
// _rn intrinsics keep the compiler from contracting into an FMA, so every
// kernel using this, and the CPU twin, gets the same float).
__device__ inline float fp8_dequant(float y, float row_scale, float col_scale) {
  return __fmul_rn(y, __fmul_rn(row_scale, col_scale));
}
__device__ inline float fp8_dequant(float y, float row_scale, float col_scale, float bias) {
  return __fadd_rn(fp8_dequant(y, row_scale, col_scale), bias);
}

}  // namespace specstack::cuda

// Decode GEMV with FP8 (e4m3) weights: y[n, out] = (x[n, in] · w8[out, in]ᵀ) * w_scale[out]
// for n <= kFp8GemvMaxRows. Batch-1 decode reads every weight once, so halving the
// bytes per weight (bf16 -> e4m3) is what makes --quantization fp8 decode faster:
// one warp (or kSplit warps) per output row, 16-byte weight loads (16 weights)
// several in flight, converted to f32 in registers (e4m3 -> f16 is exact, one
// instruction per pair on sm_90), bf16 activations, f32 accumulation, the
// per-channel scale applied once to the finished dot product. CPU twin: the
// dequantized-weight double product in tests/cuda/fp8_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fp8_quantize.h"

namespace specstack::cuda {

constexpr int64_t kFp8GemvMaxRows = 8;

// True when fp8_gemv handles these shapes: 1 <= n <= kFp8GemvMaxRows, `in` a
// multiple of 16, rows of x 16-byte aligned (ldx a multiple of 8), w8 16-byte aligned.
bool fp8_gemv_supported(const void* x, int64_t ldx, const void* w8, int64_t n, int64_t in);

// x [n, ldx] bf16, w8 [out, in] e4m3, w_scale [out] f32; y bf16 [n, ldy] or
// with y_f32 f32; plus bias [out] f32 when not null.
void fp8_gemv(const __nv_bfloat16* x, int64_t ldx, const fp8* w8, const float* w_scale, int64_t n,
              int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
              const float* bias, cudaStream_t stream);

// The MLP's gate/up and SiLU in one pass, as gemv_silu_mul (cuda/gemv.h):
// w8 [2 * width, in] (gate rows then up rows) with w_scale [2 * width];
// y [n, width] bf16 = bf16(silu(g) * u) with g, u the scaled f32 dot products.
void fp8_gemv_silu_mul(const __nv_bfloat16* x, int64_t ldx, const fp8* w8, const float* w_scale,
                       int64_t n, int64_t width, int64_t in, __nv_bfloat16* y, cudaStream_t stream);

// One input row with `split` (1, 2 or 4) warps per output row, for
// bench/fp8_bench's sweep (fp8_gemv picks by the output count).
void fp8_gemv_one_row(const __nv_bfloat16* x, const fp8* w8, const float* w_scale, int64_t out,
                      int64_t in, __nv_bfloat16* y, bool silu, int split, cudaStream_t stream);

}  // namespace specstack::cuda

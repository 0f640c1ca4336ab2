// FP8 (e4m3) row quantization for the --quantization fp8 path on Hopper.
// One scale per row: for a weight [out, in] that is one per output channel
// (quantized once at load), for activations [n, in] one per token
// (quantized before every FP8 GEMM, "dynamic" scaling). Scale = amax / 448,
// 448 being e4m3's largest finite value, so the row's largest element maps to
// ±448 and nothing saturates; q = e4m3_rne(x * (448 / amax)). An all-zero row
// gets scale 1 (q is zero either way). CPU twin: tests/cuda/fp8_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

using fp8 = __nv_fp8_e4m3;

constexpr float kFp8E4m3Max = 448.0f;

// The scales an unscaled FP8 GEMM output y [n, out] still needs, for a
// later pass to apply: fp8_dequant(y[r, c], row[r], col[c]) (fp8_device.cuh).
struct Fp8Scales {
  const float* row = nullptr;  // [n] per-token activation scales
  const float* col = nullptr;  // [out] per-channel weight scales
};

// x [rows, ldx] bf16 (first `cols` of each row) -> q [rows, cols] e4m3 (dense), scale [rows] f32.
// pdl: launched as a programmatic dependent (cuda/pdl.h); false after a copy.
void quantize_rows_fp8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols, fp8* q,
                       float* scale, cudaStream_t stream, bool pdl = true);

// y [rows, ldy] bf16 (first `cols`) *= row_scale[r] * col_scale[c], then + bias[c] when bias is
// not null: the FP8 GEMM's dequantizing epilogue where cuBLASLt cannot apply per-row / per-column
// scales itself (one pass; 8 elements per thread where cols and ldy are multiples of 8).
void scale_outer_bf16(__nv_bfloat16* y, int64_t ldy, int64_t rows, int64_t cols,
                      const float* row_scale, const float* col_scale, const float* bias,
                      cudaStream_t stream);

// y [rows, ldy] f32 (first `cols`) *= row_scale[r] * col_scale[c]: the same epilogue for an
// f32 output (the FP8 LM head's logits, Fp8Gemm::matmul_f32).
void scale_outer_f32(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* row_scale,
                     const float* col_scale, cudaStream_t stream);

// The MLP's SiLU on an unscaled FP8 GEMM output, the scales folded in on the
// way (no separate scaling pass over the wide gate/up product):
// act[r, c] = bf16(silu(g) * u), g = gate_up[r, c] * row_scale[r] * col_scale[c],
// u = gate_up[r, width + c] * row_scale[r] * col_scale[width + c], silu(g) u
// with the fast exp and divide (swiglu_math.cuh: a few f32 ulps).
// gate_up [rows, 2 * width] bf16, col_scale [2 * width] (16-byte aligned),
// act [rows, width] bf16.
void scaled_silu_mul(const __nv_bfloat16* gate_up, int64_t rows, int64_t width,
                     const float* row_scale, const float* col_scale, __nv_bfloat16* act,
                     cudaStream_t stream);

// scaled_silu_mul and quantize_rows_fp8 in one pass, for the down
// projection's FP8 GEMM: the bf16 SiLU row is staged in shared memory (never
// written to device memory), its amax taken, then written as e4m3 with its
// scale. Bit-identical to the two kernels in sequence. row_scale and
// col_scale null: gate_up is already scaled. q [rows, width] e4m3 (dense),
// q_scale [rows].
void silu_mul_quantize_fp8(const __nv_bfloat16* gate_up, int64_t rows, int64_t width,
                           const float* row_scale, const float* col_scale, fp8* q, float* q_scale,
                           cudaStream_t stream);

}  // namespace specstack::cuda

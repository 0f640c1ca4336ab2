// The MLP's gate/up projection and its SwiGLU in one Hopper kernel:
//   act[n, width] = bf16(silu(g) * u),  g = bf16(x · w[0:width]ᵀ),  u = bf16(x · w[width:2 width]ᵀ)
// with x [n, in] bf16 (rows ldx apart), w [2 width, in] bf16 (the fused gate_up
// weight: gate rows, then up rows), fp32 accumulation. What a gate_up GEMM into
// bf16 followed by silu_mul (elementwise.h) computes, but for the summation
// order of the dot products: the [n, 2 width] intermediate is never written,
// and the silu_mul pass (~5% of a 7B prefill) is gone.
//
// Tiles of 128 rows x 128 output columns: a CTA's weight tile is 128 gate rows
// and the 128 up rows of the same columns, so both halves of every output sit
// in the same thread's accumulators. TMA loads (128-byte swizzle) feed a
// 4-stage pipeline; two consumer warpgroups run wgmma m64n256k16; persistent
// CTAs walk the tiles in groups of 16 row tiles (weights and activations of
// the CTAs running together stay in L2). sm_90a only (device_runs_sm90a).
//
// fp8_swiglu_gemm is its e4m3 twin (--quantization fp8 prefill,
// fp8_swiglu_gemm.cu): x8 [n, in] with per-row scales, w8 [2 width, in] with
// per-output-row scales, 128 of k a stage (wgmma m64n128k32), each stage's
// product added into an f32 sum of its own (cuBLASLt's accumulation
// precision), tiles of 128 rows x 64 columns; it writes the bf16 SwiGLU of the
// scaled projections, which the down GEMM's per-row quantize pass reads (a
// row's e4m3 scale needs its amax across every column tile). Against the
// cuBLASLt FP8 GEMM into a [n, 2 width] bf16 product + silu_mul_quantize_fp8
// that is 5 bytes of device memory traffic per act element instead of 9.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

// Whether swiglu_gemm takes these operands: an sm_90a device, in a multiple of
// 64, width a multiple of 128, 16-byte aligned x / w / act, ldx a multiple of 8.
bool swiglu_gemm_supported(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                           int64_t width, int64_t in, const __nv_bfloat16* act);

// act [n, width] (dense rows) = the SwiGLU of x's gate/up projections (above).
void swiglu_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t width, int64_t in, __nv_bfloat16* act, cudaStream_t stream);

// Whether fp8_swiglu_gemm takes these operands: an sm_90a device, in a
// multiple of 128, width a multiple of 64, 16-byte aligned x / w / act,
// 8-byte aligned w_scale. x is dense ([n, in]).
bool fp8_swiglu_gemm_supported(const __nv_fp8_e4m3* x, const __nv_fp8_e4m3* w, const float* w_scale,
                               int64_t n, int64_t width, int64_t in, const __nv_bfloat16* act);

// act [n, width] (dense rows) = bf16(silu(g) * u) with
//   g[r, c] = bf16(Σ_k x[r, k] w[c, k]) * x_scale[r] * w_scale[c],
//   u[r, c] = bf16(Σ_k x[r, k] w[width + c, k]) * x_scale[r] * w_scale[width + c]
// (f32 sums; the products rounded and scaled as scaled_silu_mul does with an
// unscaled FP8 GEMM's bf16 output: fp8_quantize.h).
void fp8_swiglu_gemm(const __nv_fp8_e4m3* x, const float* x_scale, const __nv_fp8_e4m3* w,
                     const float* w_scale, int64_t n, int64_t width, int64_t in, __nv_bfloat16* act,
                     cudaStream_t stream);

}  // namespace specstack::cuda

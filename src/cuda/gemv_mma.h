// The 2..8-row case of the decode GEMV (cuda/gemv.h) on the tensor cores.
// The one-warp-per-row kernel converts and multiplies every input row by
// every weight element on the CUDA cores, so its cost grows with the row
// count (at 8 rows the 7B's decode step ran at 10.2 ms against 6.0 ms for
// one row: compute and L1 bound, not bandwidth bound). Here a warp owns 16
// output rows and feeds 16-byte weight loads straight into mma.m16n8k16 as
// the A operand, the (up to 8) input rows as B, so a step of 2..8 rows
// reads the weights once at about the cost of one row.
//
// Batch invariance: every output element is the same sequence of fp32 mma
// accumulations whatever the row count, so a row's result does not depend on
// the other rows of the step (a verify row equals the same row computed in
// a smaller step through this kernel).
// CPU twin: the double reference of tests/cuda/gemv_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

// Launch shape: warps per block (they split the reduction) and 32-element
// chunks each warp has in flight; zero picks the shape bench/gemv_bench
// measured best on the H100 (16 warps x 2 for matrices of <= 4096 rows,
// whose few 16-row blocks need the warps; 8 x 2 for wider ones). The sweep
// uses warps 4 or 8 with unroll 2, 4 or 8, and warps 16 with 1, 2 or 4.
struct GemvMmaShape {
  int warps = 0;
  int unroll = 0;
};

// y[n, out] (bf16, or f32 with y_f32) = x[n, ldx] · w[out, in]ᵀ (+ bias[out]).
// With silu, w is the fused gate/up matrix [2 * out, in] and
// y[:, r] = bf16(silu(x · w[r]) * (x · w[out + r])) (bias unused).
// Needs 2 <= n <= 8, in % 8 == 0, 16-byte aligned rows (gemv_supported).
void gemv_mma(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
              cudaStream_t stream, GemvMmaShape shape = {});

}  // namespace specstack::cuda

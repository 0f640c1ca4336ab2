// Skinny GEMMs for decode: y[n, out] = x[n, in] · w[out, in]ᵀ with n <= 8.
// At batch 1 a decode step is a stream of weight matrices read once, so this
// is a bandwidth kernel: for one row, one warp per output row, 16-byte
// weight loads several in flight, fp32 accumulation; for 2..8 rows (batched
// decode, speculative verify steps) the tensor-core variant of
// cuda/gemv_mma.h, which reads the weights once whatever the row count. cuBLAS's general kernels
// leave a large share of the copy bandwidth unused at these shapes (see docs/benchmarks.md). CPU
// twin: a double-precision reference in tests/cuda/gemv_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

constexpr int64_t kGemvMaxRows = 8;

// True when gemv handles these shapes: 1 <= n <= kGemvMaxRows, `in` a
// multiple of 8, rows of x and w 16-byte aligned.
bool gemv_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t in);

// y bf16 [n, ldy] or, with y_f32, f32; plus bias [out] f32 when not null.
// x [n, ldx] bf16, w [out, in] bf16
void gemv(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
          int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, cudaStream_t stream,
          const float* bias = nullptr);

// The MLP's fused gate/up projection and SiLU in one pass: for each row r <
// width, g = x · w[r], u = x · w[width + r] (fp32), y[:, r] = bf16(silu(g) * u).
// x [n, ldx] bf16, w_gate_up [2 * width, in] bf16, y [n, width] bf16.
// CPU twin: the reference in tests/cuda/gemv_test.cpp (also equal to
// linear + silu_mul up to the bf16 rounding of g and u those add).
void gemv_silu_mul(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w_gate_up, int64_t n,
                   int64_t width, int64_t in, __nv_bfloat16* y, cudaStream_t stream);

// One input row with `split` (1, 2 or 4) warps per output row (gemv picks
// by the row length; bench/gemv_bench sweeps it). With silu, w is the fused
// gate/up matrix [2 * out, in] and y = bf16(silu(gate) * up) as above.
void gemv_one_row(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t out, int64_t in,
                  __nv_bfloat16* y, float* y_f32, const float* bias, bool silu, int split,
                  cudaStream_t stream);

}  // namespace specstack::cuda

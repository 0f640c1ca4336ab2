// A GEMM for 9..128 input rows against a small weight matrix: the 0.5B
// draft's layer projections at 64-128 rows (one draft step of a 64-sequence
// batch, or its ~89-row catch-up forward), where cuBLAS read the 1.6-17 MB
// matrices at 0.27-1.7 TB/s (docs/benchmarks.md, "session 22: draft step")
// and needed a split-K reduce kernel and separate bias / SiLU launches.
//
// gemv_mma widened to up to 16 mma n tiles: a block owns 16 weight rows (the
// mma A operand, loaded from DRAM into registers, every weight read once),
// its 8 warps split k in 32-wide chunks, and each warp reads the input rows
// of its chunks straight from L2 as the B operands (every block reads all of
// x; at 64 rows that is 4x the weight bytes, from L2). The warps' fp32 sums
// are added in warp order in shared memory, then bias / SiLU / f32 or bf16
// output in the same kernel. (A first version with 64-row tiles, x staged in
// shared memory and split-k summed by the last block was 1.5-4x slower than
// cuBLAS: the last block's serial L2 reads of the partials dominated.)
//
// Rounding contract: fp32 accumulation of bf16 products, one rounding to
// bf16 at the end. A bias is added in fp32 before that rounding and SiLU is
// applied to the fp32 gate and up sums (as gemv does for <= 8 rows; the
// cuBLAS path rounds the GEMM output to bf16 first, then adds the bias or
// applies SiLU to the rounded values and rounds again).
//
// Batch invariance: an output element is the same sequence of mma steps and
// the same warp-order sum whatever the row count (mma columns do not
// interact), so a row's result does not depend on the other rows.
// CPU twin: the double reference of tests/cuda/skinny_gemm_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

constexpr int64_t kSkinnyMinRows = 9;  // up to 8 rows: gemv
constexpr int64_t kSkinnyMaxRows = 128;
// Weights up to this many elements (the 0.5B's largest, gate_up, is 8.7M;
// the 7B's smallest, o, is 12.8M). Only the 0.5B shapes were measured
// against cuBLAS (bench/gemv_bench); bigger matrices keep cuBLAS.
constexpr int64_t kSkinnyMaxWeightElements = int64_t(10) << 20;

// Whether skinny_gemm takes these operands: n in [kSkinnyMinRows,
// kSkinnyMaxRows], in % 32 == 0, ldx % 8 == 0, 16-byte aligned x and w, and
// a weight of at most kSkinnyMaxWeightElements ([2 * out, in] with SiLU).
bool skinny_gemm_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                           int64_t in, bool silu);

// y[n, out] (bf16, or f32 with y_f32; rows with stride ldy) = x[n, ldx] ·
// w[out, in]ᵀ (+ bias[out] f32). With silu, w is the fused gate/up matrix
// [2 * out, in] and y[:, r] = bf16(silu(x · w[r]) * (x · w[out + r])) (bias
// unused).
void skinny_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
                 const float* bias, bool silu, cudaStream_t stream);

}  // namespace specstack::cuda

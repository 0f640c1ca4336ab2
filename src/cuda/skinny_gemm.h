// A GEMM for 9..128 input rows against a small weight matrix: the 0.5B
// draft's layer projections at 64-128 rows (one draft step of a 64-sequence
// batch, or its ~89-row catch-up forward), where cuBLAS read the 1.6-17 MB
// matrices at 0.27-1.7 TB/s (docs/benchmarks.md, "session 22: draft step")
// and needed a split-K reduce kernel and separate bias / SiLU launches.
//
// Shape of the work: a block owns 64 weight rows (4 warps x 16, the A
// operand of mma.m16n8k16, loaded straight from DRAM into registers, every
// weight read once) and one slice of k; the input rows' slice is staged
// through shared memory (cp.async, double-buffered, 64 k at a time) and
// shared by the four warps as the B operand. A matrix with few 64-row tiles
// splits k over blocks so the GPU is full (the 896 x 896 o projection: 14
// tiles x 14 slices); the last block of a tile to finish sums the slices'
// fp32 partials in slice order and runs the epilogue (bias, SiLU, bf16 or
// f32 output), so there is no extra launch and the result is deterministic.
//
// Rounding contract: fp32 accumulation of bf16 products, one rounding to
// bf16 at the end. A bias is added in fp32 before that rounding and SiLU is
// applied to the fp32 gate and up sums (as gemv does for <= 8 rows; the
// cuBLAS path rounds the GEMM output to bf16 first, then adds the bias or
// applies SiLU to the rounded values and rounds again).
//
// Batch invariance: the k slicing depends only on (out, in), never on the
// row count, and mma columns do not interact, so a row's result is the same
// whether it is computed with 9 or with 128 rows.
// CPU twin: the double reference of tests/cuda/skinny_gemm_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

constexpr int64_t kSkinnyMinRows = 9;  // up to 8 rows: gemv
constexpr int64_t kSkinnyMaxRows = 128;
// Weights up to this many elements (the 0.5B's largest, gate_up, is 8.7M;
// the 7B's smallest, o, is 12.8M). Only the 0.5B shapes were measured
// against cuBLAS (bench/gemv_bench); bigger matrices keep cuBLAS.
constexpr int64_t kSkinnyMaxWeightElements = int64_t(10) << 20;
// Tiles per launch the counters cover (out <= 32 x this with SiLU).
constexpr int64_t kSkinnyMaxTiles = 4096;

// Whether skinny_gemm takes these operands: n in [kSkinnyMinRows,
// kSkinnyMaxRows], in % 64 == 0, ldx % 8 == 0, 16-byte aligned x and w, and
// a weight of at most kSkinnyMaxWeightElements ([2 * out, in] with SiLU).
bool skinny_gemm_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                           int64_t in, bool silu);

// The k slices a matrix is split into (a function of its shape only).
int64_t skinny_gemm_splits(int64_t out, int64_t in, bool silu);
// fp32 partials the launch needs in SkinnyGemmScratch::partials.
size_t skinny_gemm_partial_floats(int64_t out, int64_t in, bool silu);

// Scratch owned by the caller (cuda::Gemm): partials for the split-k sums,
// and kSkinnyMaxTiles counters that must be zero before the first launch
// (each launch leaves them zero again). Launches that share a scratch must
// be ordered on one stream.
struct SkinnyGemmScratch {
  float* partials = nullptr;
  size_t partial_floats = 0;
  int* counters = nullptr;
};

// y[n, out] (bf16, or f32 with y_f32; rows with stride ldy) = x[n, ldx] ·
// w[out, in]ᵀ (+ bias[out] f32). With silu, w is the fused gate/up matrix
// [2 * out, in] and y[:, r] = bf16(silu(x · w[r]) * (x · w[out + r])) (bias
// unused). splits 0: skinny_gemm_splits; a test may force another count.
void skinny_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
                 const float* bias, bool silu, const SkinnyGemmScratch& scratch,
                 cudaStream_t stream, int64_t splits = 0);

}  // namespace specstack::cuda

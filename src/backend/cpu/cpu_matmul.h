// CPU matmul y = x · wᵀ (+ bias) in two shapes of work:
//  * few rows (decode, speculative verification): a vectorised matvec that
//    streams each weight row once and applies it to every x row, since the
//    weights are the bandwidth cost and x stays in cache;
//  * many rows (prefill): OpenBLAS sgemm over tiles of weight rows, with
//    bf16/f16 tiles converted into a per-thread f32 buffer, never the whole
//    matrix.
// Both are parallelised over output features on the backend's ThreadPool.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

// Up to this many x rows the matvec path wins: it reads the weights once,
// while the sgemm path first converts them (bf16/f16) and packs them. With
// f32 weights there is no conversion to save, so sgemm wins sooner. (Measured
// on 896x4864 and 4864x896 weights, 2 cores.)
inline int64_t matmul_small_max_rows(DType weight_dtype) {
  return weight_dtype == DType::kF32 ? 8 : 12;
}

// Block-quantized weights (quant_matmul.h): up to this many x rows the int8
// kernels; beyond, the int8 register tiles where quant_prefill_uses_tiles
// says so (quant_gemm.h: Q8_0, by isa and row count), else matmul_large on
// dequantized tiles, whose f32 GEMM outruns our one-row-at-a-time integer
// dots once there are enough rows to amortise the dequantization. Measured on a 0.85B Q8_0 model, 2
// threads: 4 rows 6.7 tok/s int8 vs 5.2 sgemm; 64 rows 16.5 vs 21.9; 512 rows 16.7 vs 45.5.
inline int64_t matmul_quant_max_rows() {
  return 16;
}

// From this many x rows on, matmul() takes the block-sum GEMM (quant_blocksum.h)
// wherever quant_prefill_uses_blocksum says so, ahead of the int8 row kernels:
// its cost is flat up to 16 rows (one zmm lane per activation row), the row
// kernels' grows with each row, and at 9-16 rows it is 1.0-1.9x them on every
// block-sum type (quant_matmul_bench, 8192 x 2048, 2 threads, dev VM, session
// 28: Q4_K 1.0x at 8 rows, 1.9x at 16; Q4_0 1.07x / 1.8x; Q5_0 1.85x / 3.6x).
// Batched decode of 9-16 sequences runs on it; speculative verification of
// k + 1 <= 8 rows stays on the row kernels. This is the fewest rows at which
// any type takes it; matmul_blocksum_min_rows(dtype, isa) is the one matmul()
// uses.
inline int64_t matmul_blocksum_min_rows() {
  return 9;
}

// The K-quants whose row kernels take four activation rows at once
// (QuantKernel::dot_acts, session 29) keep the row kernels longer: against
// the block-sum GEMM on one core of the device host (8192 x 2048), Q4_K
// 1.38x / 1.15x / 0.96x at 9 / 12 / 16 rows and Q5_K 1.32x / 1.11x / 0.91x
// on AVX-512 VNNI, so from 16 rows there; on AVX-VNNI (a 256-bit block-sum
// tile) 1.88x / 1.54x / 1.20x for Q4_K, so never up to
// matmul_quant_max_rows(). Other types: matmul_blocksum_min_rows().
int64_t matmul_blocksum_min_rows(DType dtype, Isa isa);

// x [n, in] f32, w [out, in] f32/bf16/f16, bias [out] f32 or null, y [n, out] f32.
void matmul_small(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa = kNativeIsa);
void matmul_large(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa = kNativeIsa);

// Picks matmul_small / matmul_quant / matmul_quant_tiled or matmul_large by
// the number of rows and the weight dtype (see above).
void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y);

// out[r - row_begin, :] = w[r, :] as f32 for r in [row_begin, row_end).
// w [rows, cols] f32/bf16/f16; out [(row_end - row_begin) * cols]. Used by
// matmul_large per tile and by embedding per row.
void convert_rows_to_f32(const Tensor& w, int64_t row_begin, int64_t row_end, float* out,
                         Isa isa = kNativeIsa);

}  // namespace specstack::cpu

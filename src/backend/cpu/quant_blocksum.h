// The block-sum int8 GEMM: prefill on Q8_0 (and Q4_0 / Q5_0 / Q4_K / Q5_K, unpacked to
// it) weights with AVX-512 VNNI or AVX-VNNI,
// activations quantized to Q8_0 blocks as for every int8 path, each
// (weight row, activation row) summed per 32-value block in int32 and the
// blocks added in f32:
//   acc = +0; for each block b: acc = fma(d_w[b] * d_a[b], float(Σ_j w_j a_j), acc)
// (blocksum_dot_ref is that, in scalar code; the kernel equals it bit for
// bit). One zmm holds one weight row against 16 activation rows, so a
// block costs 8 vpdpbusd + convert + scale product + FMA per 512
// multiply-adds (quant_blocksum_avx512.cpp; AVX-VNNI: two ymm halves,
// quant_blocksum_avx2.cpp), a third of the packed tiles' work (quant_gemm.h), which keep the one-row kernel's 16 partial lanes
// per block pair so as to equal the decode kernels bit for bit. These
// floats differ from the decode kernels' in the last bits (one rounding per
// block instead of one per 4 values), as the dequantize + sgemm path's
// always did; both are within the int8 error of the dequantized product.
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

// Whether matmul_quant_blocksum serves weights of `dtype` on `isa` (Q8_0,
// Q4_0, Q5_0, Q4_K, Q5_K and Q8_0 panels (quant_panels.h, unpacked to rows
// per cache tile) on AVX-512 VNNI or AVX-VNNI, when this CPU has it).
bool quant_blocksum_available(DType dtype, Isa isa);

// y = x · wᵀ (+ bias): x [n, in] f32, w [out, in] Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K, bias
// [out] f32 or null, y [n, out] f32. Q8_0: y[i, o] = blocksum_dot_ref(w row
// o, x row i's Q8_0 blocks) (+ bias[o]) bit for bit; Q4_0 / Q5_0 the same
// over their blocks as Q8_0 ones (q - 8 / q - 16, the same f16 scale). K-quants: each 32-value
// sub-block is w = scale * q - min (q 0..15 / 0..31: a valid int8), so the
// same kernel sums scale * d_a * (q · a) over the unpacked q, and
// Σ min * d_a Σ a comes off at the end: the dequantized weights times the
// Q8_0 activations, up to f32 rounding.
void matmul_quant_blocksum(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y, Isa isa);

// The scalar reference of one output: w_row and act_row n_blocks Q8_0
// blocks (quant_blocks.h BlockQ8_0).
float blocksum_dot_ref(const void* w_row, const void* act_row, int64_t n_blocks);

}  // namespace specstack::cpu

// Quantization of f32 rows into ggml block formats, for HF checkpoints
// quantized at load (--quantization q8_0|q4_k). The formats are the ones the
// dequantizer (gguf/gguf_dequant.cpp, tested against gguf-py) reads and the
// quantized matmul kernels (quant_matmul.h) run; the tests check every
// quantized block by dequantizing it there.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace specstack::cpu {

// n values (a multiple of 32) -> n / 32 Q8_0 blocks at dst. Round to
// nearest with d = amax / 127 as ggml's quantize_row_q8_0_ref, except that
// the values are divided by the d actually stored (f16), not the f32 one:
// then every value is within d / 2 of its dequantized value (ggml's
// reference can be off by up to ~0.56 d where f16 rounds d).
void quantize_row_q8_0(const float* x, int64_t n, void* dst);

// n values (a multiple of 256) -> n / 256 Q4_K blocks at dst. Round to
// nearest on a min/max grid per sub-block of 32 (not ggml's iterative
// make_qkx2_quants search): sub-block j covers [lo_j, hi_j] with
// lo_j = min(min(x), 0), its 6-bit min m_j = ceil(-lo_j / dmin) and 6-bit
// scale sc_j = ceil((hi_j + dmin m_j) / (15 d)), d and dmin the f16 super-
// block scales rounded up. Rounding the codes up keeps the 16-level grid
// {d sc_j q - dmin m_j} covering every value, so each value is within
// d sc_j / 2 of its dequantized value (the bound the tests check); the
// price against an optimal search is a grid up to one scale step wider.
void quantize_row_q4_k(const float* x, int64_t n, void* dst);

// n values (a multiple of 256) -> n / 256 Q6_K blocks at dst (for the
// Q4_K_M mix's LM head, attn_v and ffn_down). Round to nearest on a
// symmetric grid per sub-block of 16 (not ggml's make_qx_quants search):
// int8 scale sc_j = ceil(amax_j / (31 d)), d = max_j amax_j / (31 * 127)
// rounded up to f16, codes in [-32, 31]; every value is within d sc_j / 2
// of its dequantized value.
void quantize_row_q6_k(const float* x, int64_t n, void* dst);

// A [rows, cols] f32 / bf16 / f16 host matrix as a new tensor of `target`
// (kQ8_0, kQ4_K or kQ6_K; cols a multiple of its block), rows split over
// threads.
Tensor quantize_matrix(const Tensor& w, DType target);

}  // namespace specstack::cpu

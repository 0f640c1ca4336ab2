// Integer dot products of one quantized weight row with one quantized
// activation row, llama.cpp's scheme: the activations are quantized per
// block to int8 (Q8_0: 32 values and an f16 scale, for Q8_0/Q4_0/Q5_0
// weights; Q8_K: 256 values, an f32 scale and 16-value sums, for the
// K-quants), each block's products are summed in integers and scaled, and
// the blocks accumulate in f32.
//
// Every kernel has a scalar reference and an AVX2 twin computing the same
// integer sums (they differ only in the order of the f32 accumulation). The
// AVX2 file is compiled with -mavx2 -mfma -mf16c whatever the build's -march,
// and quant_best_isa() picks it at run time from CPUID: this is the one
// place that chooses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/simd.h"
#include "tensor/dtype.h"

namespace specstack::cpu {

enum class QuantAct : uint8_t { kQ8_0, kQ8_K };

struct QuantKernel {
  QuantAct act;                // how activations are quantized for this weight type
  int64_t act_block_elements;  // 32 or 256
  size_t act_block_bytes;      // 34 or 292
  // sum over n_blocks of w_row · act_row (n_blocks activation blocks, the
  // same element count as the weight row).
  float (*dot)(const void* w_row, const void* act_row, int64_t n_blocks);
};

// Whether `dtype` has a quantized kernel (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K).
bool quant_has_kernel(DType dtype);

// Whether this CPU and build can run `isa` for the quantized kernels.
bool quant_isa_available(Isa isa);

// The fastest available: AVX2 where CPUID reports AVX2 + FMA + F16C, else scalar.
Isa quant_best_isa();

// The kernel for weights of `dtype` on `isa` (both checked).
QuantKernel quant_kernel(DType dtype, Isa isa);

// x [n] f32 -> n / block activation blocks of `act` at out. Round to nearest
// even of x * 127 / max|x| per block, as llama.cpp's x86 quantize_row_q8_0
// does, and as its quantize_row_q8_K_ref for Q8_K (scale from the signed
// value of largest magnitude, so that value becomes exactly -127).
void quantize_activations(QuantAct act, const float* x, int64_t n, void* out);

namespace quant_scalar {
float dot_q8_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_0(const void* w, const void* a, int64_t n_blocks);
float dot_q5_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_k(const void* w, const void* a, int64_t n_blocks);
float dot_q5_k(const void* w, const void* a, int64_t n_blocks);
float dot_q6_k(const void* w, const void* a, int64_t n_blocks);
}  // namespace quant_scalar

#if SS_QUANT_AVX2
namespace quant_avx2 {
float dot_q8_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_0(const void* w, const void* a, int64_t n_blocks);
float dot_q5_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_k(const void* w, const void* a, int64_t n_blocks);
float dot_q5_k(const void* w, const void* a, int64_t n_blocks);
float dot_q6_k(const void* w, const void* a, int64_t n_blocks);
}  // namespace quant_avx2
#endif

}  // namespace specstack::cpu

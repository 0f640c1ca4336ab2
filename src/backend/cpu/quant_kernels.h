// Integer dot products of one (dot) or four (dot4) quantized weight rows
// with one quantized activation row, llama.cpp's scheme: the activations are quantized per
// block to int8 (Q8_0: 32 values and an f16 scale, for Q8_0/Q4_0/Q5_0
// weights; Q8_K: 256 values, an f32 scale and 16-value sums, for the
// K-quants), each block's products are summed in integers and scaled, and
// the blocks accumulate in f32.
//
// Every kernel has a scalar reference, an AVX2 twin computing the same
// integer sums (they differ only in the order of the f32 accumulation) and an
// AVX-512 VNNI twin equal to the AVX2 one bit for bit (same integer lanes,
// same f32 order; quant_kernels_avx512.cpp). The SIMD files are compiled
// with their target flags whatever the build's -march, and quant_best_isa()
// picks one at run time from CPUID / XGETBV (quant_isa.cpp): this is the one
// place that chooses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/simd.h"
#include "tensor/dtype.h"

namespace specstack::cpu {

enum class QuantAct : uint8_t { kQ8_0, kQ8_K };

// A kernel's own form of an activation row, made from the quantized blocks
// once per matmul and read by every weight row: where the blocks' layout
// costs the kernel work per weight block that depends on the activations
// only. Q4_0 on AVX2 / AVX-512 VNNI has one (quant_blocks.h Q4_0Act: the
// activations in the unpacked nibbles' order, the weights' -8 offset as
// -8 Σa per int32 lane, the scales in f32; quant_q4_0_avx2.cpp says why
// that is faster). dot / dot4 on the prepared row give the same floats as
// QuantKernel::dot / dot4 on the blocks, bit for bit.
struct QuantPrepared {
  int64_t bytes_per_block = 0;  // 0: the kernel has no prepared form
  void (*prepare)(const void* act_row, int64_t n_blocks, void* out) = nullptr;
  float (*dot)(const void* w_row, const void* prep_row, int64_t n_blocks) = nullptr;
  void (*dot4)(const void* w, int64_t w_stride, const void* prep_row, int64_t n_blocks,
               float* out) = nullptr;
};

struct QuantKernel {
  QuantAct act;                // how activations are quantized for this weight type
  int64_t act_block_elements;  // 32 or 256
  size_t act_block_bytes;      // 34 or 292
  // sum over n_blocks of w_row · act_row (n_blocks activation blocks, the
  // same element count as the weight row).
  float (*dot)(const void* w_row, const void* act_row, int64_t n_blocks);
  // out[r] = dot(w + r * w_stride, act_row, n_blocks) for r = 0..3, bit for
  // bit (the same integer sums and f32 order per row): four weight rows per
  // pass over the activation blocks, so a core follows four DRAM streams
  // (one stream is what one core's one-row loop reaches: ~7.7 GB/s on the
  // device Xeon, docs/benchmarks.md) and loads each activation block once.
  // The scalar isa runs the one-row reference four times.
  void (*dot4)(const void* w, int64_t w_stride, const void* act_row, int64_t n_blocks, float* out);
  QuantPrepared prepared{};  // none for most types and for the scalar isa
  // out[j] = dot(w_row, act + j * act_stride, n_blocks) for j < na
  // (1..dot_acts_max), bit for bit: one weight row against up to
  // dot_acts_max activation rows (4 on AVX2 / AVX-VNNI, 8 on AVX-512), each
  // weight block unpacked once for all of them. The K-quants (Q4_K, Q5_K,
  // Q6_K) on the SIMD isas, where unpacking is most of a block's work, so
  // that batched decode and speculative verification cost less than one
  // pass per activation row; null elsewhere.
  void (*dot_acts)(const void* w_row, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) = nullptr;
  int dot_acts_max = 0;  // with dot_acts: its most rows at once (<= kQuantDotActsMax)
};

// The most activation rows QuantKernel::dot_acts takes at once on any isa.
inline constexpr int kQuantDotActsMax = quant::kDotActsMax;

// Whether `dtype` has a quantized kernel (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K).
bool quant_has_kernel(DType dtype);

// Whether this CPU and build can run `isa` for the quantized kernels:
// kAvx2 needs AVX2 + FMA + F16C; kAvxVnni those and AVX-VNNI; kAvx512Vnni
// AVX2 + FMA + F16C and AVX-512 F / BW / VL / VNNI with the OS saving the zmm
// and mask registers (XCR0).
bool quant_isa_available(Isa isa);

// The environment variable that pins the quantized kernels' isa for A/B
// runs (values as parse_quant_isa takes them).
inline constexpr const char* kQuantIsaEnv = "SPECSTACK_QUANT_ISA";

// "scalar", "avx2", "avxvnni" or "avx512vnni" -> *isa; false for anything else.
bool parse_quant_isa(const char* name, Isa* isa);

// The isa for SPECSTACK_QUANT_ISA's value `pinned` (null or empty: unset):
// the one it names when this CPU has it, else the fastest available
// (AVX-512 VNNI, AVX-VNNI, AVX2, scalar) with a one-line *note saying why the value
// was ignored (*note empty otherwise).
Isa choose_quant_isa(const char* pinned, std::string* note);

// choose_quant_isa(getenv(SPECSTACK_QUANT_ISA)), decided once per process at
// the first call; a note goes to stderr. The isa every quantized matmul uses.
Isa quant_best_isa();

// The environment variable that pins how many weight rows the quantized
// matmul reads per pass ("1": the one-row kernel, "4": the four-row
// kernels), for A/B runs; both give the same floats.
inline constexpr const char* kQuantRowsEnv = "SPECSTACK_QUANT_ROWS";

// Whether CPUID's vendor is GenuineIntel (probed once; false off x86).
bool quant_cpu_is_intel();

// The rows per pass when nothing is pinned, for the kernels of `isa` on an
// Intel (`intel`) or other CPU: 4 with the AVX-512 VNNI kernels (1.25-1.74x
// one row on the Xeon measured in docs/benchmarks.md) and the AVX-VNNI ones;
// with AVX2, 4 on Intel and 1 elsewhere. On the device host's Sapphire
// Rapids cores (one core, session 29) four rows were 1.7-2.0x one row for
// Q8_0 / Q4_K / Q6_K at one activation row with the AVX2 kernels and the
// AVX-VNNI ones alike: an Intel core keeps few lines in flight for one
// stream. On the AVX2-only AMD EPYC VM the AVX2 four-row kernel ran at
// 0.6-0.85x of one row (16 ymm registers hold four rows' accumulators only
// with spills). An AVX2-only Intel CPU (before Alder Lake) was not measured:
// its default follows the Xeon's cores.
int default_quant_rows(Isa isa, bool intel);

// SPECSTACK_QUANT_ROWS's value `pinned` (null or empty: unset) -> 1 or 4;
// unset gives default_quant_rows(isa, quant_cpu_is_intel()), anything else the same with a
// one-line *note (*note empty otherwise).
int choose_quant_rows(const char* pinned, Isa isa, std::string* note);

// choose_quant_rows(getenv(SPECSTACK_QUANT_ROWS), quant_best_isa()), once per
// process; a note goes to stderr.
int quant_rows_per_pass();

// One line for a start-up log: the isa and weight rows per pass the
// quantized matmuls run with, whether Q8_0 matrices go into panels and
// K-quant rows run together, e.g. "int8 kernels avx512vnni, 4 weight rows
// per pass, Q8_0 panels on, K-quant rows together on".
std::string describe_quant_kernels();

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

#define SS_DECLARE_DOT_ACTS                                                                        \
  void dot_acts_q4_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na, \
                     float* out);                                                                  \
  void dot_acts_q5_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na, \
                     float* out);                                                                  \
  void dot_acts_q6_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na, \
                     float* out);
#if SS_QUANT_AVX2
// The AVX2 kernels (quant_kernels_avx2.cpp, quant_q4_0_avx2.cpp) and their
// AVX-VNNI build, the same sources compiled again into quant_avxvnni with
// vpdpbusd / vpdpwssd for the integer dots (quant_simd_avx2.h): one list.
// The Q4_0 prepared forms: prepare_q4_0's layout serves the AVX-512 VNNI
// twin too.
#define SS_DECLARE_AVX2_FAMILY                                                                  \
  float dot_q8_0(const void* w, const void* a, int64_t n_blocks);                               \
  float dot_q4_0(const void* w, const void* a, int64_t n_blocks);                               \
  float dot_q5_0(const void* w, const void* a, int64_t n_blocks);                               \
  float dot_q4_k(const void* w, const void* a, int64_t n_blocks);                               \
  float dot_q5_k(const void* w, const void* a, int64_t n_blocks);                               \
  float dot_q6_k(const void* w, const void* a, int64_t n_blocks);                               \
  void dot4_q8_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void dot4_q4_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void dot4_q5_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void dot4_q4_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void dot4_q5_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void dot4_q6_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out); \
  void prepare_q4_0(const void* act_row, int64_t n_blocks, void* out);                          \
  float dot_q4_0_prepared(const void* w, const void* prep, int64_t n_blocks);                   \
  void dot4_q4_0_prepared(const void* w, int64_t w_stride, const void* prep, int64_t n_blocks,  \
                          float* out);                                                          \
  SS_DECLARE_DOT_ACTS
namespace quant_avx2 {
SS_DECLARE_AVX2_FAMILY
}  // namespace quant_avx2
namespace quant_avxvnni {
SS_DECLARE_AVX2_FAMILY
}  // namespace quant_avxvnni
#undef SS_DECLARE_AVX2_FAMILY
#endif

#if SS_QUANT_AVX512
namespace quant_avx512vnni {
float dot_q8_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_0(const void* w, const void* a, int64_t n_blocks);
float dot_q5_0(const void* w, const void* a, int64_t n_blocks);
float dot_q4_k(const void* w, const void* a, int64_t n_blocks);
float dot_q5_k(const void* w, const void* a, int64_t n_blocks);
float dot_q6_k(const void* w, const void* a, int64_t n_blocks);
void dot4_q8_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
void dot4_q4_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
void dot4_q5_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
void dot4_q4_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
void dot4_q5_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
void dot4_q6_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out);
float dot_q4_0_prepared(const void* w, const void* prep,
                        int64_t n_blocks);  // quant_q4_0_avx512.cpp
void dot4_q4_0_prepared(const void* w, int64_t w_stride, const void* prep, int64_t n_blocks,
                        float* out);
SS_DECLARE_DOT_ACTS
}  // namespace quant_avx512vnni
#endif
#undef SS_DECLARE_DOT_ACTS

}  // namespace specstack::cpu

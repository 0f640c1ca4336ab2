// ggml's block formats as C structs (ggml-common.h), for the quantized
// matmul kernels: the weight blocks GGUF files store, and the two int8
// activation blocks the weights are multiplied with. Only plain structs and
// internal-linkage helpers here: the AVX2 kernels' file is compiled with
// -mavx2 and must not emit shared inline functions (see quant_kernels.h).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

namespace specstack::cpu::quant {

constexpr int kQk = 32;    // elements of a Q8_0 / Q4_0 / Q5_0 block
constexpr int kQkK = 256;  // elements of a K-quant super-block

// y = d * q.
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQk];
};
// y = (nibble - 8) * d; element j in the low nibble of qs[j], j + 16 in the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQk / 2];
};
// y = ((nibble | fifth bit << 4) - 16) * d; bit j of qh is element j's fifth bit.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQk / 2];
};
// Eight sub-blocks of 32 with 6-bit scales and mins: y = d * sc * q - dmin * m.
// Each 64 elements share 32 bytes of qs: low nibbles first, then high.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQkK / 2];
};
// Q4_K plus a fifth bit per element: bit 2i / 2i + 1 of qh[l] for the i-th
// group of 64 (low / high half).
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQkK / 8];
  uint8_t qs[kQkK / 2];
};
// y = d * scale * (q6 - 32), sixteen int8 scales of 16 elements.
struct BlockQ6_K {
  uint8_t ql[kQkK / 2];
  uint8_t qh[kQkK / 4];
  int8_t scales[kQkK / 16];
  uint16_t d;
};
// Activations for K-quant weights: f32 scale, and the sums of each 16
// values, which turn the weights' per-sub-block offsets (Q4_K/Q5_K mins,
// Q6_K's -32) into one multiply per 16 values.
struct BlockQ8_K {
  float d;
  int8_t qs[kQkK];
  int16_t bsums[kQkK / 16];
};

// A Q8_0 activation row re-laid out once per matmul for the Q4_0 kernels'
// pair loop (quant_q4_0_avx2.cpp / quant_q4_0_avx512.cpp), three arrays in
// one buffer of kQ4_0ActBytesPerBlock bytes per block:
//   qs  [32 n] int8: each pair of blocks b, b + 1 (b even) as
//       [b 0-15 | b+1 0-15 | b 16-31 | b+1 16-31], the order the two weight
//       blocks' nibbles take when their 32 bytes are unpacked together (low
//       nibbles, then high); an odd last block as it is;
//   off [8 n] int32: -8 x the sum of each 4 consecutive values of qs: the
//       weights' -8 offset moved onto the activations (Σ (q - 8) a =
//       Σ q a - 8 Σ a over each 4 values: exact integers), so the kernel
//       multiplies the nibbles as they are, unsigned, with no sign trick;
//   d   [n] f32: the block scales, converted from f16 once.
constexpr int64_t kQ4_0ActBytesPerBlock = kQk + 8 * 4 + 4;
struct Q4_0Act {
  int8_t* qs;
  int32_t* off;
  float* d;
};
struct Q4_0ActView {
  const int8_t* qs;
  const int32_t* off;
  const float* d;
};
static inline Q4_0Act q4_0_act(void* row, int64_t n_blocks) {
  auto* p = static_cast<uint8_t*>(row);
  return {reinterpret_cast<int8_t*>(p), reinterpret_cast<int32_t*>(p + kQk * n_blocks),
          reinterpret_cast<float*>(p + 2 * kQk * n_blocks)};
}
static inline Q4_0ActView q4_0_act_view(const void* row, int64_t n_blocks) {
  const auto* p = static_cast<const uint8_t*>(row);
  return {reinterpret_cast<const int8_t*>(p), reinterpret_cast<const int32_t*>(p + kQk * n_blocks),
          reinterpret_cast<const float*>(p + 2 * kQk * n_blocks)};
}

// The most activation rows a dot_acts kernel (quant_kernels.h
// QuantKernel::dot_acts) takes at once: kDotActsMax over every isa (buffer
// sizes), kDotActsMaxYmm where 16 vector registers hold a kernel's
// accumulators (AVX2, AVX-VNNI), kDotActsMaxZmm with AVX-512's 32: a 5-row
// speculative verification is then one pass over the weights, each block
// unpacked once. with_act_rows<kMax> dispatches each isa's entry points:
// f(std::integral_constant<int, na>{}) for na = 1..kMax (more: kMax), the row
// count as the kernel's template argument. Internal linkage, instantiated per
// calling lambda, so per translation unit and its target flags.
constexpr int kDotActsMaxYmm = 4;
constexpr int kDotActsMaxZmm = 8;
constexpr int kDotActsMax = kDotActsMaxZmm;
template <int kMax, int kN = 1, typename F>
static inline void with_act_rows(int na, F&& f) {
  if constexpr (kN == kMax) {
    f(std::integral_constant<int, kN>{});
  } else {
    if (na <= kN) return f(std::integral_constant<int, kN>{});
    with_act_rows<kMax, kN + 1>(na, std::forward<F>(f));
  }
}

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace specstack::cpu::quant

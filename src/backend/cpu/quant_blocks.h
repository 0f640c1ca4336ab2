// ggml's block formats as C structs (ggml-common.h), for the quantized
// matmul kernels: the weight blocks GGUF files store, and the two int8
// activation blocks the weights are multiplied with. Only plain structs and
// internal-linkage helpers here: the AVX2 kernels' file is compiled with
// -mavx2 and must not emit shared inline functions (see quant_kernels.h).
#pragma once

#include <cstdint>

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

static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace specstack::cpu::quant

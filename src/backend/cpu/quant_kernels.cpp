#include "backend/cpu/quant_kernels.h"

#include <cmath>
#include <cstring>
#include <string>

#include "backend/cpu/quant_blocks.h"
#include "base/check.h"
#include "gguf/gguf_dequant.h"

namespace specstack::cpu {
namespace {

using namespace quant;

float f16(uint16_t bits) {
  return f16_to_f32(bits);
}

// Round to nearest, ties to even (llama.cpp's _mm256_round_ps and its
// nearest_int both do this; std::lround would round ties away from zero).
int round_even(float v) {
  return static_cast<int>(std::nearbyint(v));
}

void quantize_q8_0(const float* x, int64_t n, BlockQ8_0* out) {
  for (int64_t b = 0; b < n / kQk; ++b, x += kQk) {
    float amax = 0.0f;
    for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out[b].d = f32_to_f16(d);
    for (int j = 0; j < kQk; ++j) out[b].qs[j] = static_cast<int8_t>(round_even(x[j] * id));
  }
}

void quantize_q8_k(const float* x, int64_t n, BlockQ8_K* out) {
  for (int64_t b = 0; b < n / kQkK; ++b, x += kQkK) {
    BlockQ8_K& y = out[b];
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQkK; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < kQkK; ++j) {
      y.qs[j] = static_cast<int8_t>(std::min(127, round_even(iscale * x[j])));
    }
    for (int g = 0; g < kQkK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y.qs[g * 16 + j];
      y.bsums[g] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

// The 8 scales and mins of a Q4_K / Q5_K block, and the mins' dot with the
// activation's 32-value sums (the sums of the bsums pairs).
int k4_scales_and_min_dot(const uint8_t* packed, const int16_t* bsums, int* sc) {
  int min_dot = 0;
  for (int j = 0; j < 8; ++j) {
    int m;
    gguf::scale_min_k4(j, packed, sc[j], m);
    min_dot += m * (bsums[2 * j] + bsums[2 * j + 1]);
  }
  return min_dot;
}

}  // namespace

namespace quant_scalar {

float dot_q8_0(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQk; ++j) sumi += x[b].qs[j] * y[b].qs[j];
    sum += static_cast<float>(sumi) * (f16(x[b].d) * f16(y[b].d));
  }
  return sum;
}

float dot_q4_0(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int sumi = 0;
    for (int j = 0; j < kQk / 2; ++j) {
      sumi += ((x[b].qs[j] & 0x0F) - 8) * y[b].qs[j];
      sumi += ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + kQk / 2];
    }
    sum += static_cast<float>(sumi) * (f16(x[b].d) * f16(y[b].d));
  }
  return sum;
}

float dot_q5_0(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t qh;
    std::memcpy(&qh, x[b].qh, 4);
    int sumi = 0;
    for (int j = 0; j < kQk / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      sumi += (((x[b].qs[j] & 0x0F) | h0) - 16) * y[b].qs[j];
      sumi += (((x[b].qs[j] >> 4) | h1) - 16) * y[b].qs[j + kQk / 2];
    }
    sum += static_cast<float>(sumi) * (f16(x[b].d) * f16(y[b].d));
  }
  return sum;
}

// Sub-block j (32 values) of a Q4_K / Q5_K block is the low (j even) or high
// nibbles of qs[32 * (j / 2) ...], plus bit j of qh[l] as the fifth bit for
// Q5_K. One body for both: the formats differ only by that bit.
template <class Block, bool kFifthBit>
float dot_k_nibbles(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int sc[8];
    const int min_dot = k4_scales_and_min_dot(x[b].scales, y[b].bsums, sc);
    int total = 0;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = x[b].qs + 32 * (j / 2);
      const int8_t* q8 = y[b].qs + 32 * j;
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        int v = j % 2 ? q[l] >> 4 : q[l] & 0x0F;
        if constexpr (kFifthBit) v |= ((x[b].qh[l] >> j) & 1) << 4;
        s += v * q8[l];
      }
      total += sc[j] * s;
    }
    sum += y[b].d * f16(x[b].d) * static_cast<float>(total) -
           y[b].d * f16(x[b].dmin) * static_cast<float>(min_dot);
  }
  return sum;
}

float dot_q4_k(const void* w, const void* a, int64_t n_blocks) {
  return dot_k_nibbles<BlockQ4_K, false>(w, a, n_blocks);
}

float dot_q5_k(const void* w, const void* a, int64_t n_blocks) {
  return dot_k_nibbles<BlockQ5_K, true>(w, a, n_blocks);
}

// Values 0-127 of each half use ql[0..63] (low nibbles, then high) and the
// 2-bit pairs of qh[0..31]; value e of a half has scale e / 16.
float dot_q6_k(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  float sum = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int8_t q[kQkK];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const uint8_t* qh = x[b].qh + 32 * half;
      int8_t* out = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int total = 0;
    for (int g = 0; g < kQkK / 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += q[g * 16 + l] * y[b].qs[g * 16 + l];
      total += x[b].scales[g] * s;
    }
    sum += y[b].d * f16(x[b].d) * static_cast<float>(total);
  }
  return sum;
}

}  // namespace quant_scalar

namespace {

// The scalar isa's four-row form: the one-row reference four times.
template <float (*Dot)(const void*, const void*, int64_t)>
void four_rows(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  for (int r = 0; r < 4; ++r)
    out[r] = Dot(static_cast<const uint8_t*>(w) + r * w_stride, a, n_blocks);
}

}  // namespace

bool quant_has_kernel(DType dtype) {
  // Every ggml block type has one; Q8_0 panels have their own (quant_panels.h).
  return dtype_is_quantized(dtype) && dtype != DType::kQ8_0P;
}

QuantKernel quant_kernel(DType dtype, Isa isa) {
  SS_CHECK_MSG(quant_isa_available(isa),
               std::string("quantized kernels: isa not available here: ") + isa_name(isa));
  const bool k = dtype_block_elements(dtype) == kQkK;
  QuantKernel kernel{k ? QuantAct::kQ8_K : QuantAct::kQ8_0,
                     k ? kQkK : kQk,
                     k ? sizeof(BlockQ8_K) : sizeof(BlockQ8_0),
                     nullptr,
                     nullptr,
                     {}};
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
#define SS_PICK(fn)                                                   \
  kernel.dot = isa == Isa::kAvx512Vnni ? quant_avx512vnni::dot_##fn   \
               : isa == Isa::kAvxVnni  ? quant_avxvnni::dot_##fn      \
               : isa == Isa::kAvx2     ? quant_avx2::dot_##fn         \
                                       : quant_scalar::dot_##fn;          \
  kernel.dot4 = isa == Isa::kAvx512Vnni ? quant_avx512vnni::dot4_##fn \
                : isa == Isa::kAvxVnni  ? quant_avxvnni::dot4_##fn    \
                : isa == Isa::kAvx2     ? quant_avx2::dot4_##fn       \
                                        : four_rows<quant_scalar::dot_##fn>
#else
#define SS_PICK(fn)                    \
  kernel.dot = quant_scalar::dot_##fn; \
  kernel.dot4 = four_rows<quant_scalar::dot_##fn>
#endif
  switch (dtype) {
    case DType::kQ8_0:
      SS_PICK(q8_0);
      break;
    case DType::kQ4_0:
      SS_PICK(q4_0);
      break;
    case DType::kQ5_0:
      SS_PICK(q5_0);
      break;
    case DType::kQ4_K:
      SS_PICK(q4_k);
      break;
    case DType::kQ5_K:
      SS_PICK(q5_k);
      break;
    case DType::kQ6_K:
      SS_PICK(q6_k);
      break;
    default:
      SS_CHECK_MSG(false, std::string("no quantized kernel for ") + dtype_name(dtype));
  }
#undef SS_PICK
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
#define SS_ACTS(ns)                            \
  (dtype == DType::kQ4_K   ? ns::dot_acts_q4_k \
   : dtype == DType::kQ5_K ? ns::dot_acts_q5_k \
   : dtype == DType::kQ6_K ? ns::dot_acts_q6_k \
                           : nullptr)
  kernel.dot_acts = isa == Isa::kAvx512Vnni ? SS_ACTS(quant_avx512vnni)
                    : isa == Isa::kAvxVnni  ? SS_ACTS(quant_avxvnni)
                    : isa == Isa::kAvx2     ? SS_ACTS(quant_avx2)
                                            : nullptr;
#undef SS_ACTS
  if (kernel.dot_acts != nullptr) {
    kernel.dot_acts_max = isa == Isa::kAvx512Vnni ? quant::kDotActsMaxZmm : quant::kDotActsMaxYmm;
  }
  if (dtype == DType::kQ4_0 && isa == Isa::kAvx512Vnni) {
    kernel.prepared = {kQ4_0ActBytesPerBlock, quant_avx2::prepare_q4_0,
                       quant_avx512vnni::dot_q4_0_prepared, quant_avx512vnni::dot4_q4_0_prepared};
  } else if (dtype == DType::kQ4_0 && isa == Isa::kAvxVnni) {
    kernel.prepared = {kQ4_0ActBytesPerBlock, quant_avxvnni::prepare_q4_0,
                       quant_avxvnni::dot_q4_0_prepared, quant_avxvnni::dot4_q4_0_prepared};
  } else if (dtype == DType::kQ4_0 && isa == Isa::kAvx2) {
    kernel.prepared = {kQ4_0ActBytesPerBlock, quant_avx2::prepare_q4_0,
                       quant_avx2::dot_q4_0_prepared, quant_avx2::dot4_q4_0_prepared};
  }
#endif
  return kernel;
}

void quantize_activations(QuantAct act, const float* x, int64_t n, void* out) {
  if (act == QuantAct::kQ8_0) {
    SS_CHECK_EQ(n % kQk, 0);
    quantize_q8_0(x, n, static_cast<BlockQ8_0*>(out));
  } else {
    SS_CHECK_EQ(n % kQkK, 0);
    quantize_q8_k(x, n, static_cast<BlockQ8_K*>(out));
  }
}

}  // namespace specstack::cpu

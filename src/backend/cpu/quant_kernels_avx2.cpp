// AVX2 twins of the scalar quantized dot products (quant_kernels.cpp), after
// llama.cpp's ggml_vec_dot_*: _mm256_maddubs_epi16 multiplies unsigned by
// signed bytes into int16 pairs, _mm256_madd_epi16 widens to int32. Built
// with -mavx2 -mfma -mf16c (CMakeLists.txt) and only called after CPUID
// says so, hence no shared inline code here: everything is file-local.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"

#if SS_QUANT_AVX2
namespace specstack::cpu::quant_avx2 {
namespace {

using namespace quant;

inline float f16(uint16_t bits) {
  return _cvtsh_ss(bits);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 32 nibbles from 16 bytes: low nibbles in bytes 0-15, high in 16-31.
inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}

// Byte j = 0xFF where bit j of the 32 bits at p is set.
inline __m256i bits_32(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

// Sum of x * y over signed bytes as 8 int32 lanes: maddubs needs one
// unsigned operand, so move x's sign onto y (|x| * sign(x) y). Neither side
// is -128 (our activations are within +-127).
inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_madd_epi16(_mm256_set1_epi16(1), p16);
}

// The shared loop of the 32-blocks: Σ_b d_w d_a Σ_j w_j a_j.
template <typename Block, typename Values>
inline float dot_32(const void* w, const void* a, int64_t n_blocks, Values values) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m256 d = _mm256_set1_ps(f16(x[b].d) * f16(y[b].d));
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(values(x[b]), q8)), acc);
  }
  return hsum(acc);
}

// Scales of a Q4_K / Q5_K block, and the activation-sum dot of its mins.
inline int k4_scales(const uint8_t* packed, const int16_t* bsums, int* sc) {
  int min_dot = 0;
  for (int j = 0; j < 8; ++j) {
    int m;
    scale_min_k4(j, packed, sc[j], m);
    min_dot += m * (bsums[2 * j] + bsums[2 * j + 1]);
  }
  return min_dot;
}

// Σ_l q[l] * q8[l] for 32 unsigned q (< 64) times the sub-block scale, as
// 8 int32 lanes.
inline __m256i scaled_dot_u(__m256i q, const int8_t* q8, int scale) {
  const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  return _mm256_madd_epi16(_mm256_set1_epi16(static_cast<int16_t>(scale)),
                           _mm256_maddubs_epi16(q, y));
}

}  // namespace

float dot_q8_0(const void* w, const void* a, int64_t n_blocks) {
  return dot_32<BlockQ8_0>(w, a, n_blocks, [](const BlockQ8_0& b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  });
}

float dot_q4_0(const void* w, const void* a, int64_t n_blocks) {
  return dot_32<BlockQ4_0>(w, a, n_blocks, [](const BlockQ4_0& b) {
    return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
  });
}

// (nibble | bit << 4) - 16 == nibble | (bit ? 0 : 0xF0) as int8.
float dot_q5_0(const void* w, const void* a, int64_t n_blocks) {
  return dot_32<BlockQ5_0>(w, a, n_blocks, [](const BlockQ5_0& b) {
    const __m256i hi = _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(char(0xF0)));
    return _mm256_or_si256(nibbles_32(b.qs), hi);
  });
}

float dot_q4_k(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int sc[8];
    const int min_dot = k4_scales(x[b].scales, y[b].bsums, sc);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * j));
      const __m256i lo = _mm256_and_si256(bits, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
      sumi = _mm256_add_epi32(sumi, scaled_dot_u(lo, y[b].qs + 64 * j, sc[2 * j]));
      sumi = _mm256_add_epi32(sumi, scaled_dot_u(hi, y[b].qs + 64 * j + 32, sc[2 * j + 1]));
    }
    const float d = y[b].d * f16(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    acc_min += y[b].d * f16(x[b].dmin) * static_cast<float>(min_dot);
  }
  return hsum(acc) - acc_min;
}

float dot_q5_k(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ5_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int sc[8];
    const int min_dot = k4_scales(x[b].scales, y[b].bsums, sc);
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * j));
      // Bit 2j / 2j + 1 of each qh byte, moved to bit 4 (a 16-bit shift is
      // safe: only that one bit is left in each byte).
      const __m256i mlo = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
      const __m256i mhi = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
      const __m256i h_lo = _mm256_slli_epi16(
          _mm256_srl_epi16(_mm256_and_si256(hbits, mlo), _mm_cvtsi32_si128(2 * j)), 4);
      const __m256i h_hi = _mm256_slli_epi16(
          _mm256_srl_epi16(_mm256_and_si256(hbits, mhi), _mm_cvtsi32_si128(2 * j + 1)), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), h_lo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), h_hi);
      sumi = _mm256_add_epi32(sumi, scaled_dot_u(lo, y[b].qs + 64 * j, sc[2 * j]));
      sumi = _mm256_add_epi32(sumi, scaled_dot_u(hi, y[b].qs + 64 * j + 32, sc[2 * j + 1]));
    }
    const float d = y[b].d * f16(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    acc_min += y[b].d * f16(x[b].dmin) * static_cast<float>(min_dot);
  }
  return hsum(acc) - acc_min;
}

// q6 - 32 is signed, so as llama.cpp: maddubs(q6, a) - maddubs(32, a), both
// within int16, then the int16 scales of each 16 values.
float dot_q6_k(const void* w, const void* a, int64_t n_blocks) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[b].ql + 64 * half;
      const int8_t* q8 = y[b].qs + 128 * half;
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh + 32 * half));
      __m256i q[4];
      q[0] =
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
      for (int k = 0; k < 4; ++k) {
        const __m256i a8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k));
        const __m256i p16 =
            _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], a8), _mm256_maddubs_epi16(m32, a8));
        // Scales 8 * half + 2k and + 1, each for 16 values (8 int16 lanes).
        const int s = 8 * half + 2 * k;
        const __m128i pick =
            _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sc16, p16));
      }
    }
    const float d = y[b].d * f16(x[b].d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
  }
  return hsum(acc);
}

}  // namespace specstack::cpu::quant_avx2
#endif  // SS_QUANT_AVX2

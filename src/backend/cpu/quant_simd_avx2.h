// The small AVX2 helpers the quantized kernels share (quant_kernels_avx2.cpp,
// quant_q4_0_avx2.cpp, quant_tile_avx2.cpp): one copy, so that the three
// files unpack, convert and sum exactly alike. Only for files compiled with
// -mavx2 -mfma -mf16c (CMakeLists.txt) and called after CPUID says so: the
// helpers are inline functions of this isa's namespace, and a file built
// with other target flags must not include them (a copy compiled for
// AVX-512 could be the one the linker keeps), hence the #error.
//
// The same three files are compiled a second time with -mavxvnni and
// SS_QUANT_VNNI256=1 (CMakeLists.txt: ss_quant_avxvnni), into the namespace
// quant_avxvnni instead of quant_avx2 (SS_QUANT_AVX2_NS): there the integer
// dot products below are one VEX vpdpbusd / vpdpwssd instead of maddubs +
// madd + add. Every caller keeps maddubs's int16 pair sums in range, so
// both builds compute the same integers and the kernels the same floats.
#pragma once

#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "quant_simd_avx2.h needs -mavx2 -mfma -mf16c"
#endif
#if SS_QUANT_VNNI256
#if !defined(__AVXVNNI__)
#error "quant_simd_avx2.h with SS_QUANT_VNNI256 needs -mavxvnni"
#endif
#define SS_QUANT_AVX2_NS quant_avxvnni
#else
#define SS_QUANT_AVX2_NS quant_avx2
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"

namespace specstack::cpu::SS_QUANT_AVX2_NS::simd {

inline float f16(uint16_t bits) {
  return _cvtsh_ss(bits);
}

inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// Lanes summed as ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)): every kernel's
// final order, so twins that share it give the same float.
inline float hsum(__m256 v) {
  return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// acc + Σ of each 4 products u_k s_k per int32 lane (u unsigned, s signed
// bytes). maddubs saturates each pair u_k s_k + u_k+1 s_k+1 to int16: the
// callers' operands keep it in range (|u| <= 128 against |s| <= 127), where
// vpdpbusd's exact sums are the same integers.
inline __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if SS_QUANT_VNNI256
  return _mm256_dpbusd_avx_epi32(acc, u, s);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// acc + Σ of each 2 products of int16 lanes per int32 lane (exact in both).
inline __m256i dot_s16(__m256i acc, __m256i a, __m256i b) {
#if SS_QUANT_VNNI256
  return _mm256_dpwssd_avx_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
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

// A 32-block's values as signed bytes, element j in byte j.
inline __m256i values(const quant::BlockQ8_0& b) {
  return load256(b.qs);
}
inline __m256i values(const quant::BlockQ4_0& b) {
  return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
}
// (nibble | bit << 4) - 16 == nibble | (bit ? 0 : 0xF0) as int8.
inline __m256i values(const quant::BlockQ5_0& b) {
  return _mm256_or_si256(nibbles_32(b.qs),
                         _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(char(0xF0))));
}

// [f16(x[0].d) f16(x[1].d)] of two consecutive Q4_0 blocks in lanes 0, 1:
// one conversion for the pair.
inline __m128 pair_d(const quant::BlockQ4_0* x) {
  const int d2 = static_cast<int>(uint32_t{x[0].d} | uint32_t{x[1].d} << 16);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(d2));
}

// The 32 bytes of two consecutive Q4_0 blocks' nibbles, [x[0].qs | x[1].qs].
inline __m256i pair_qs(const quant::BlockQ4_0* x) {
  return _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(x[1].qs),
                             reinterpret_cast<const __m128i*>(x[0].qs));
}

}  // namespace specstack::cpu::SS_QUANT_AVX2_NS::simd
#endif  // SS_QUANT_AVX2

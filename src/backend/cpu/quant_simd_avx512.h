// The small AVX-512 VNNI helpers the quantized kernels share
// (quant_kernels_avx512.cpp, quant_q4_0_avx512.cpp, quant_tile_avx512.cpp):
// one copy, so that the three files unpack, convert and sum exactly alike
// (and as quant_simd_avx2.h's twins do: the VNNI kernels are bit-equal to
// the AVX2 ones). Only for files compiled with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni (CMakeLists.txt) and called after CPUID and
// XGETBV say so; the helpers are inline functions of this isa's namespace,
// and a file built with other target flags must not include them, hence the
// #error.
#pragma once

#if SS_QUANT_AVX512  // x86 builds only (CMakeLists.txt)
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512VNNI__) || !defined(__FMA__) || !defined(__F16C__)
#error "quant_simd_avx512.h needs -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mfma -mf16c"
#endif
// GCC 12's _mm512_castsi256_si512 and friends start from an "undefined"
// register that its flow analysis reports as uninitialized (GCC bug 105593);
// the upper half is always written before use in these files.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"

namespace specstack::cpu::quant_avx512vnni::simd {

inline float f16(uint16_t bits) {
  return _cvtsh_ss(bits);
}

inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// Lanes summed as ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)), as the AVX2 twin.
inline float hsum(__m256 v) {
  return hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// [lo | hi]: two 32-byte chunks in one register.
inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// The AVX2 kernel's 8 int32 lanes from a [chunk a | chunk b] lane vector.
inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
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
  return _mm256_movm_epi8(static_cast<__mmask32>(x));
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

// Four-row passes (QuantKernel::dot4) prefetch each row's weight blocks
// this many bytes ahead of the block being read: far enough for DRAM's
// latency at a core's ~13 GB/s, near enough that 4 rows' worth stay in L1.
#ifndef SS_QUANT_PREFETCH_BYTES
#define SS_QUANT_PREFETCH_BYTES 1024
#endif
inline constexpr int64_t kPrefetchBytes = SS_QUANT_PREFETCH_BYTES;

// The distance in bytes from block b of a row of n_blocks Blocks to the one
// to prefetch: kPrefetchBytes further along the row while that stays in it,
// else as far into the row of the next pass (`next_pass` bytes on), so the
// next pass starts on cached lines. A prefetch never faults, past the matrix
// end either.
template <typename Block>
inline int64_t prefetch_ahead(int64_t b, int64_t n_blocks, int64_t next_pass) {
  constexpr int64_t kBlocks =
      (kPrefetchBytes + int64_t(sizeof(Block)) - 1) / int64_t(sizeof(Block));
  constexpr int64_t kAhead = kBlocks * int64_t(sizeof(Block));
  return b + kBlocks < n_blocks ? kAhead : kAhead - n_blocks * int64_t(sizeof(Block)) + next_pass;
}

}  // namespace specstack::cpu::quant_avx512vnni::simd
#endif  // SS_QUANT_AVX512

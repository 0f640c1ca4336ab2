// AVX-512 VNNI twins of the AVX2 quantized dot products
// (quant_kernels_avx2.cpp): the same integer sums on 512-bit vectors, with
// vpdpbusd (u8 x s8, four products into an int32 lane) for the 32-blocks and
// vpdpwssd (int16 pairs x int16 scales into int32) for the K-quants. Built
// with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt) and only
// called after CPUID and XGETBV say so, hence file-local but for the entry
// points and the helpers of quant_simd_avx512.h (same flags).
//
// Every kernel reproduces the AVX2 kernel's eight int32 lanes exactly: a
// 512-bit vector holds two 32-byte chunks that the AVX2 kernel processes one
// after the other, its lane i (low half) and lane 8 + i (high half) hold the
// sums the AVX2 kernel adds into its lane i, and adding the halves gives that
// lane (integer sums, no overflow: the AVX2 bounds hold). The f32 steps then
// run in the AVX2 order, so the results equal the AVX2 kernels bit for bit
// (tests/backend/quant_vnni_test.cpp checks that).
#if SS_QUANT_AVX512  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_simd_avx512.h"

namespace specstack::cpu::quant_avx512vnni {
namespace {

using namespace quant;
using namespace simd;

// Σ x * y over signed bytes, four per int32 lane. vpdpbusd wants an unsigned
// operand: |x| (-128 -> 128 as u8, still exact) times y with x's sign.
inline __m512i dot_i8(__m512i x, __m512i y) {
  const __mmask64 neg = _mm512_movepi8_mask(x);
  const __m512i signed_y = _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y);
  return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(x), signed_y);
}

inline __m256i dot_i8_256(__m256i x, __m256i y) {
  const __mmask32 neg = _mm256_movepi8_mask(x);
  const __m256i signed_y = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), signed_y);
}

// Short rows defeat the hardware prefetchers when four rows are read side by
// side: each row is its own stream of a few dozen cache lines (2 KiB for a
// 2048-wide Q8_0 row) that they must detect anew. So while a four-row pass
// reads block b of rows o .. o + 3, it asks for block b of rows o + 4 ..
// o + 7 (the next pass: `ahead` bytes further), both of the block's ends, so
// every line of it. A prefetch never faults, past the matrix end either.
template <typename Block>
inline void prefetch_block(const Block* block, int64_t ahead) {
  const char* p = reinterpret_cast<const char*>(block) + ahead;
  _mm_prefetch(p, _MM_HINT_T0);
  for (size_t off = 64; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
  _mm_prefetch(p + sizeof(Block) - 1, _MM_HINT_T0);
}

// The 32-blocks two at a time: block b in the low half (the AVX2 kernel's
// acc[0]), b + 1 in the high half (its acc[1]); an odd last block goes to
// the low half, as there. R weight rows (w_stride bytes apart) against one
// activation row, each row's steps those of R = 1 (see the AVX2 file).
template <int R, typename Block>
inline void dot_32(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks,
                   float* out) {
  const Block* x[R];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const Block*>(w + r * w_stride);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m512i yv = join(load256(y[b].qs), load256(y[b + 1].qs));
    const float dy0 = f16(y[b].d), dy1 = f16(y[b + 1].d);
    for (int r = 0; r < R; ++r) {
      if constexpr (R > 1) {
        prefetch_block(&x[r][b], prefetch_ahead<Block>(b, n_blocks, R * w_stride));
        prefetch_block(&x[r][b + 1], prefetch_ahead<Block>(b + 1, n_blocks, R * w_stride));
      }
      const __m512i xv = join(values(x[r][b]), values(x[r][b + 1]));
      const __m512 d = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(x[r][b].d) * dy0),
                                            _mm512_set1_ps(f16(x[r][b + 1].d) * dy1));
      acc[r] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot_i8(xv, yv)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 lo = _mm512_castps512_ps256(acc[r]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
    if (b < n_blocks) {
      const __m256 d = _mm256_set1_ps(f16(x[r][b].d) * f16(y[b].d));
      lo =
          _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_256(values(x[r][b]), load256(y[b].qs))), lo);
    }
    out[r] = hsum(_mm256_add_ps(lo, hi));
  }
}

// As quant_kernels_avx2.cpp: the 8 six-bit scales of a Q4_K / Q5_K block in
// int16 lanes 0-7 of both 128-bit halves of *scales and its 8 mins in the
// int16 lanes of *mins; k4_min_dot gives the mins' dot with an activation
// block's 32-value sums as 4 int32 lanes.
inline void k4_scales_mins(const uint8_t* packed, __m256i* scales, __m128i* mins) {
  constexpr uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
  const uint32_t mins_lo = u[1] & kmask1;
  u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
  u[2] = mins_lo;
  u[0] &= kmask1;
  const __m256i mins_and_scales =
      _mm256_cvtepu8_epi16(_mm_set_epi32(int(u[3]), int(u[2]), int(u[1]), int(u[0])));
  const __m128i sc = _mm256_castsi256_si128(mins_and_scales);
  *scales = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
  *mins = _mm256_extracti128_si256(mins_and_scales, 1);
}

inline __m128i k4_min_dot(__m128i mins, const int16_t* bsums) {
  const __m256i sums = load256(bsums);
  const __m128i pair_sums =
      _mm_hadd_epi16(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  return _mm_madd_epi16(mins, pair_sums);
}

// Scale j of k4_scales_mins's vector in every int16 lane.
inline __m256i scale_lane(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales,
                             _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}

// Group j (64 values: sub-blocks 2j, 2j + 1) of a Q4_K / Q5_K block as
// unsigned bytes, [low nibbles | high nibbles] of qs[32 j ...]; Q5_K adds bit
// 2j (low half) / 2j + 1 (high half) of each qh byte (hbits) as bit 4.
template <bool kFifthBit>
inline __m512i k_group(const uint8_t* qs, __m256i hbits, int j) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bits = load256(qs + 32 * j);
  __m256i lo = _mm256_and_si256(bits, m4);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
  if constexpr (kFifthBit) {
    const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
    const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
    const __m256i sixteen = _mm256_set1_epi8(16);
    lo = _mm256_or_si256(lo, _mm256_maskz_mov_epi8(_mm256_test_epi8_mask(hbits, bit_lo), sixteen));
    hi = _mm256_or_si256(hi, _mm256_maskz_mov_epi8(_mm256_test_epi8_mask(hbits, bit_hi), sixteen));
  }
  return join(lo, hi);
}

// Q4_K and Q5_K: the 64 values of group j are [low nibbles | high nibbles]
// of qs[32 j ...] (sub-blocks 2j, 2j + 1), matching 64 contiguous activation
// bytes, so one 512-bit maddubs and one vpdpwssd with [scale 2j | scale 2j+1]
// do what the AVX2 kernel does in two of each plus two adds. R rows block by
// block, each row's steps those of R = 1.
template <int R, class Block, bool kFifthBit>
void dot_k_nibbles(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks,
                   float* out) {
  const auto* y = static_cast<const BlockQ8_K*>(a);
  __m256 acc[R];
  __m128 acc_min[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), acc_min[r] = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      const Block& x = reinterpret_cast<const Block*>(w + r * w_stride)[b];
      if constexpr (R > 1) prefetch_block(&x, prefetch_ahead<Block>(b, n_blocks, R * w_stride));
      __m256i sc;
      __m128i mins;
      k4_scales_mins(x.scales, &sc, &mins);
      const __m128i min_dot = k4_min_dot(mins, y[b].bsums);
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kFifthBit) hbits = load256(x.qh);
      __m512i sumi = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        const __m512i q = k_group<kFifthBit>(x.qs, hbits, j);
        const __m512i q8 = _mm512_loadu_si512(y[b].qs + 64 * j);
        const __m512i scales = join(scale_lane(sc, 2 * j), scale_lane(sc, 2 * j + 1));
        sumi = _mm512_dpwssd_epi32(sumi, scales, _mm512_maddubs_epi16(q, q8));
      }
      const float d = y[b].d * f16(x.d);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold(sumi)), acc[r]);
      acc_min[r] =
          _mm_fmadd_ps(_mm_set1_ps(y[b].d * f16(x.dmin)), _mm_cvtepi32_ps(min_dot), acc_min[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum128(acc_min[r]);
}

// One weight row against NA activation rows (act_stride bytes apart): each
// block unpacked once (its groups, scales and mins), then per activation
// row the one-row kernel's integer and f32 steps, so out[a] equals
// dot_k_nibbles<1> on row a bit for bit. Unpacking is most of a K-quant
// block's work, so NA rows cost well under NA one-row passes (batched
// decode, speculative verification).
template <int NA, class Block, bool kFifthBit>
void dot_k_nibbles_acts(const uint8_t* w, const uint8_t* act, int64_t act_stride, int64_t n_blocks,
                        float* out) {
  const auto* x = reinterpret_cast<const Block*>(w);
  const BlockQ8_K* y[NA];
  for (int a = 0; a < NA; ++a) y[a] = reinterpret_cast<const BlockQ8_K*>(act + a * act_stride);
  __m256 acc[NA];
  __m128 acc_min[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm256_setzero_ps(), acc_min[a] = _mm_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i sc;
    __m128i mins;
    k4_scales_mins(x[b].scales, &sc, &mins);
    __m256i hbits = _mm256_setzero_si256();
    if constexpr (kFifthBit) hbits = load256(x[b].qh);
    __m512i sumi[NA];
    for (int a = 0; a < NA; ++a) sumi[a] = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i q = k_group<kFifthBit>(x[b].qs, hbits, j);
      const __m512i scales = join(scale_lane(sc, 2 * j), scale_lane(sc, 2 * j + 1));
      for (int a = 0; a < NA; ++a) {
        const __m512i q8 = _mm512_loadu_si512(y[a][b].qs + 64 * j);
        sumi[a] = _mm512_dpwssd_epi32(sumi[a], scales, _mm512_maddubs_epi16(q, q8));
      }
    }
    const float dx = f16(x[b].d), dmin = f16(x[b].dmin);
    for (int a = 0; a < NA; ++a) {
      acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(y[a][b].d * dx), _mm256_cvtepi32_ps(fold(sumi[a])),
                               acc[a]);
      acc_min[a] = _mm_fmadd_ps(_mm_set1_ps(y[a][b].d * dmin),
                                _mm_cvtepi32_ps(k4_min_dot(mins, y[a][b].bsums)), acc_min[a]);
    }
  }
  for (int a = 0; a < NA; ++a) out[a] = hsum(acc[a]) - hsum128(acc_min[a]);
}

// The 128 six-bit values of half of a Q6_K block (ql: its 64 bytes, qh:
// its 32) as unsigned bytes, q[0] = [values 0-31 | 32-63], q[1] = [64-95 |
// 96-127] of the half (the activation order).
inline void q6_groups(const uint8_t* ql, const uint8_t* qh, __m512i* q) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i l1 = load256(ql);
  const __m256i l2 = load256(ql + 32);
  const __m256i h = load256(qh);
  const __m256i q0 =
      _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
  const __m256i q1 =
      _mm256_or_si256(_mm256_and_si256(l2, m4),
                      _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
  const __m256i q2 =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                      _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
  const __m256i q3 =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                      _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
  q[0] = join(q0, q1);
  q[1] = join(q2, q3);
}

// Scales s .. s + 3 of a Q6_K block (its 16 int8 scales in `scales`), each
// for 16 values (8 int16 lanes).
inline __m512i q6_scales(__m128i scales, int64_t s) {
  const __m128i pick_lo = _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s);
  const __m128i pick_hi =
      _mm_set_epi64x(0x0101010101010101LL * (s + 3), 0x0101010101010101LL * (s + 2));
  return _mm512_cvtepi8_epi16(
      _mm256_set_m128i(_mm_shuffle_epi8(scales, pick_hi), _mm_shuffle_epi8(scales, pick_lo)));
}

// Q6_K, one weight row against NA activation rows (see dot_k_nibbles_acts):
// out[a] equals dot_q6_k_rows<1> on row a bit for bit.
template <int NA>
void dot_q6_k_acts(const uint8_t* w, const uint8_t* act, int64_t act_stride, int64_t n_blocks,
                   float* out) {
  const auto* x = reinterpret_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y[NA];
  for (int a = 0; a < NA; ++a) y[a] = reinterpret_cast<const BlockQ8_K*>(act + a * act_stride);
  const __m512i m32 = _mm512_set1_epi8(32);
  __m256 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
    __m512i sumi[NA];
    for (int a = 0; a < NA; ++a) sumi[a] = _mm512_setzero_si512();
    for (int half = 0; half < 2; ++half) {
      __m512i q[2];
      q6_groups(x[b].ql + 64 * half, x[b].qh + 32 * half, q);
      for (int k = 0; k < 4; k += 2) {
        const __m512i sc16 = q6_scales(scales, 8 * half + 2 * k);
        for (int a = 0; a < NA; ++a) {
          const __m512i a8 = _mm512_loadu_si512(y[a][b].qs + 128 * half + 32 * k);
          const __m512i p16 =
              _mm512_sub_epi16(_mm512_maddubs_epi16(q[k / 2], a8), _mm512_maddubs_epi16(m32, a8));
          sumi[a] = _mm512_dpwssd_epi32(sumi[a], sc16, p16);
        }
      }
    }
    const float dx = f16(x[b].d);
    for (int a = 0; a < NA; ++a)
      acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(y[a][b].d * dx), _mm256_cvtepi32_ps(fold(sumi[a])),
                               acc[a]);
  }
  for (int a = 0; a < NA; ++a) out[a] = hsum(acc[a]);
}

// As the AVX2 kernel: maddubs(q6, a) - maddubs(32, a) in int16, then the
// int8 scales of each 16 values; two 32-value chunks per 512-bit step. R rows
// as above.
template <int R>
void dot_q6_k_rows(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks,
                   float* out) {
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m512i m32 = _mm512_set1_epi8(32);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K& x = reinterpret_cast<const BlockQ6_K*>(w + r * w_stride)[b];
      if constexpr (R > 1) prefetch_block(&x, prefetch_ahead<BlockQ6_K>(b, n_blocks, R * w_stride));
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
      __m512i sumi = _mm512_setzero_si512();
      for (int half = 0; half < 2; ++half) {
        const int8_t* q8 = y[b].qs + 128 * half;
        __m512i q[2];
        q6_groups(x.ql + 64 * half, x.qh + 32 * half, q);
        for (int k = 0; k < 4; k += 2) {
          const __m512i a8 = _mm512_loadu_si512(q8 + 32 * k);
          const __m512i p16 =
              _mm512_sub_epi16(_mm512_maddubs_epi16(q[k / 2], a8), _mm512_maddubs_epi16(m32, a8));
          sumi = _mm512_dpwssd_epi32(sumi, q6_scales(scales, 8 * half + 2 * k), p16);
        }
      }
      const float d = y[b].d * f16(x.d);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(fold(sumi)), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

// One row (the QuantKernel::dot form) of an R-row kernel.
template <void (*Rows1)(const uint8_t*, int64_t, const void*, int64_t, float*)>
float one_row(const void* w, const void* a, int64_t n_blocks) {
  float out;
  Rows1(static_cast<const uint8_t*>(w), 0, a, n_blocks, &out);
  return out;
}

template <int R, typename Block>
void dot_32_rows(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_32<R, Block>(w, w_stride, a, n_blocks, out);
}

}  // namespace

float dot_q8_0(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_32_rows<1, BlockQ8_0>>(w, a, n_blocks);
}
float dot_q4_0(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_32_rows<1, BlockQ4_0>>(w, a, n_blocks);
}
float dot_q5_0(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_32_rows<1, BlockQ5_0>>(w, a, n_blocks);
}
float dot_q4_k(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_k_nibbles<1, BlockQ4_K, false>>(w, a, n_blocks);
}
float dot_q5_k(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_k_nibbles<1, BlockQ5_K, true>>(w, a, n_blocks);
}
float dot_q6_k(const void* w, const void* a, int64_t n_blocks) {
  return one_row<dot_q6_k_rows<1>>(w, a, n_blocks);
}

void dot4_q8_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_32_rows<4, BlockQ8_0>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}
void dot4_q4_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_32_rows<4, BlockQ4_0>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}
void dot4_q5_0(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_32_rows<4, BlockQ5_0>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}
void dot4_q4_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_k_nibbles<4, BlockQ4_K, false>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}
void dot4_q5_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_k_nibbles<4, BlockQ5_K, true>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}
void dot4_q6_k(const void* w, int64_t w_stride, const void* a, int64_t n_blocks, float* out) {
  dot_q6_k_rows<4>(static_cast<const uint8_t*>(w), w_stride, a, n_blocks, out);
}

void dot_acts_q4_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) {
  with_act_rows<kDotActsMaxZmm>(na, [&](auto rows) {
    dot_k_nibbles_acts<rows(), BlockQ4_K, false>(static_cast<const uint8_t*>(w),
                                                 static_cast<const uint8_t*>(act), act_stride,
                                                 n_blocks, out);
  });
}
void dot_acts_q5_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) {
  with_act_rows<kDotActsMaxZmm>(na, [&](auto rows) {
    dot_k_nibbles_acts<rows(), BlockQ5_K, true>(static_cast<const uint8_t*>(w),
                                                static_cast<const uint8_t*>(act), act_stride,
                                                n_blocks, out);
  });
}
void dot_acts_q6_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) {
  with_act_rows<kDotActsMaxZmm>(na, [&](auto rows) {
    dot_q6_k_acts<rows()>(static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(act),
                          act_stride, n_blocks, out);
  });
}

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

// AVX2 twins of the scalar quantized dot products (quant_kernels.cpp), after
// llama.cpp's ggml_vec_dot_*: _mm256_maddubs_epi16 multiplies unsigned by
// signed bytes into int16 pairs, _mm256_madd_epi16 widens to int32. Built
// with -mavx2 -mfma -mf16c (CMakeLists.txt) and only called after CPUID
// says so, hence file-local but for the entry points and the helpers of
// quant_simd_avx2.h (shared with the other AVX2 files, same flags). Built a
// second time as the AVX-VNNI kernels (namespace quant_avxvnni), where
// dot_u8s8 and dot_s16 are single vpdpbusd / vpdpwssd: the same integers,
// so the same floats (quant_simd_avx2.h).
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_simd_avx2.h"

namespace specstack::cpu::SS_QUANT_AVX2_NS {
namespace {

using namespace quant;
using namespace simd;

// Sum of x * y over signed bytes as 8 int32 lanes: maddubs needs one
// unsigned operand, so move x's sign onto y (|x| * sign(x) y). Neither side
// is -128 (our activations are within +-127).
inline __m256i dot_i8(__m256i x, __m256i y) {
  return dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
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

// The shared loop of the 32-blocks for R weight rows (w_stride bytes
// apart) against one activation row: per row Σ_b d_w d_a Σ_j w_j a_j, two
// blocks per iteration into two accumulators so consecutive FMAs do not wait
// on each other. Each row's integer sums and f32 steps are those of R = 1
// (the one-row kernel), so every R gives the same floats; R > 1 follows R
// DRAM streams at once and loads each activation block once for all rows.
template <int R, typename Block>
inline void dot_32(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks,
                   float* out) {
  const Block* x[R];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const Block*>(w + r * w_stride);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  auto block = [&](int64_t b, int slot) {
    const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[b].qs));
    const float dy = f16(y[b].d);
    for (int r = 0; r < R; ++r) {
      if constexpr (R > 1) prefetch_block(&x[r][b], R * w_stride);
      const __m256 d = _mm256_set1_ps(f16(x[r][b].d) * dy);
      acc[r][slot] =
          _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(values(x[r][b]), q8)), acc[r][slot]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < n_blocks) block(b, 0);
  for (int r = 0; r < R; ++r) out[r] = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
}

// The 8 six-bit scales (int16 lanes 0-7 of *scales, both 128-bit halves)
// and the 8 mins (int16 lanes of *mins) of a Q4_K / Q5_K block: ggml's bit
// shuffle of the 12 packed bytes into scales[0..7], mins[0..7]
// (gguf::scale_min_k4 is the per-index form). k4_min_dot: the mins' dot
// with an activation block's 32-value sums, as 4 int32 lanes.
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
  const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
  const __m128i pair_sums =
      _mm_hadd_epi16(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
  return _mm_madd_epi16(mins, pair_sums);
}

// Scale j of k4_scales_mins's vector in every int16 lane.
inline __m256i scale_lane(__m256i scales, int j) {
  return _mm256_shuffle_epi8(scales,
                             _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}

// sumi + Σ_l q[l] * q8[l] for 32 unsigned q (< 64) times the sub-block
// scale (int16 lanes), as 8 int32 lanes.
inline __m256i add_scaled_dot_u(__m256i sumi, __m256i q, const int8_t* q8, __m256i scale) {
  const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8));
  return dot_s16(sumi, scale, _mm256_maddubs_epi16(q, y));
}

// Sub-blocks 2j (*lo) and 2j + 1 (*hi) of a Q4_K / Q5_K block as unsigned
// bytes: low and high nibbles of qs[32 j ...]; Q5_K adds bit 2j / 2j + 1 of
// each qh byte (hbits) as bit 4 (a 16-bit shift is safe: only that one bit
// is left in each byte).
template <bool kFifthBit>
inline void k_group(const uint8_t* qs, __m256i hbits, int j, __m256i* lo, __m256i* hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
  *lo = _mm256_and_si256(bits, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
  if constexpr (kFifthBit) {
    const __m256i mlo = _mm256_set1_epi8(static_cast<char>(1 << (2 * j)));
    const __m256i mhi = _mm256_set1_epi8(static_cast<char>(1 << (2 * j + 1)));
    *lo = _mm256_or_si256(
        *lo, _mm256_slli_epi16(
                 _mm256_srl_epi16(_mm256_and_si256(hbits, mlo), _mm_cvtsi32_si128(2 * j)), 4));
    *hi = _mm256_or_si256(
        *hi, _mm256_slli_epi16(
                 _mm256_srl_epi16(_mm256_and_si256(hbits, mhi), _mm_cvtsi32_si128(2 * j + 1)), 4));
  }
}

// Q4_K and Q5_K in one body: 4 x 64 values a block, low nibbles then high
// nibbles of qs[32 j ...]; Q5_K adds bit 2j / 2j + 1 of each qh byte as the
// fifth bit. R rows block by block (see dot_32), each row's steps those of R = 1.
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
      if constexpr (R > 1) prefetch_block(&x, R * w_stride);
      __m256i sc;
      __m128i mins;
      k4_scales_mins(x.scales, &sc, &mins);
      const __m128i min_dot = k4_min_dot(mins, y[b].bsums);
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (kFifthBit) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
      __m256i sumi = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        __m256i lo, hi;
        k_group<kFifthBit>(x.qs, hbits, j, &lo, &hi);
        sumi = add_scaled_dot_u(sumi, lo, y[b].qs + 64 * j, scale_lane(sc, 2 * j));
        sumi = add_scaled_dot_u(sumi, hi, y[b].qs + 64 * j + 32, scale_lane(sc, 2 * j + 1));
      }
      const float d = y[b].d * f16(x.d);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
      acc_min[r] =
          _mm_fmadd_ps(_mm_set1_ps(y[b].d * f16(x.dmin)), _mm_cvtepi32_ps(min_dot), acc_min[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) - hsum128(acc_min[r]);
}

// One weight row against NA activation rows (act_stride bytes apart): each
// block unpacked once (groups, scales, mins), then per activation row the
// one-row kernel's integer and f32 steps, so out[a] equals dot_k_nibbles<1>
// on row a bit for bit. Unpacking is most of a K-quant block's work, so NA
// rows cost well under NA one-row passes (batched decode, speculative
// verification).
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
    if constexpr (kFifthBit) hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qh));
    __m256i sumi[NA];
    for (int a = 0; a < NA; ++a) sumi[a] = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      __m256i lo, hi;
      k_group<kFifthBit>(x[b].qs, hbits, j, &lo, &hi);
      const __m256i s_lo = scale_lane(sc, 2 * j), s_hi = scale_lane(sc, 2 * j + 1);
      for (int a = 0; a < NA; ++a) {
        sumi[a] = add_scaled_dot_u(sumi[a], lo, y[a][b].qs + 64 * j, s_lo);
        sumi[a] = add_scaled_dot_u(sumi[a], hi, y[a][b].qs + 64 * j + 32, s_hi);
      }
    }
    const float dx = f16(x[b].d), dmin = f16(x[b].dmin);
    for (int a = 0; a < NA; ++a) {
      acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(y[a][b].d * dx), _mm256_cvtepi32_ps(sumi[a]), acc[a]);
      acc_min[a] = _mm_fmadd_ps(_mm_set1_ps(y[a][b].d * dmin),
                                _mm_cvtepi32_ps(k4_min_dot(mins, y[a][b].bsums)), acc_min[a]);
    }
  }
  for (int a = 0; a < NA; ++a) out[a] = hsum(acc[a]) - hsum128(acc_min[a]);
}

// The 128 six-bit values of half of a Q6_K block (ql: its 64 bytes, qh:
// its 32) as unsigned bytes, q[k] = values 32k .. 32k + 31 of the half.
inline void q6_groups(const uint8_t* ql, const uint8_t* qh, __m256i* q) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i l2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
  q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
}

// Scales s and s + 1 of a Q6_K block (its 16 int8 scales in `scales`),
// each for 16 values (8 int16 lanes).
inline __m256i q6_scales(__m128i scales, int s) {
  const __m128i pick = _mm_set_epi64x(0x0101010101010101LL * (s + 1), 0x0101010101010101LL * s);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, pick));
}

// q6 - 32 is signed, so as llama.cpp: maddubs(q6, a) - maddubs(32, a), both
// within int16, then the int16 scales of each 16 values. R rows as above.
template <int R>
void dot_q6_k_rows(const uint8_t* w, int64_t w_stride, const void* a, int64_t n_blocks,
                   float* out) {
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K& x = reinterpret_cast<const BlockQ6_K*>(w + r * w_stride)[b];
      if constexpr (R > 1) prefetch_block(&x, R * w_stride);
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
      __m256i sumi = _mm256_setzero_si256();
      for (int half = 0; half < 2; ++half) {
        const int8_t* q8 = y[b].qs + 128 * half;
        __m256i q[4];
        q6_groups(x.ql + 64 * half, x.qh + 32 * half, q);
        for (int k = 0; k < 4; ++k) {
          const __m256i a8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k));
          const __m256i p16 =
              _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], a8), _mm256_maddubs_epi16(m32, a8));
          sumi = dot_s16(sumi, q6_scales(scales, 8 * half + 2 * k), p16);
        }
      }
      const float d = y[b].d * f16(x.d);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]);
}

// Q6_K, one weight row against NA activation rows (see dot_k_nibbles_acts):
// out[a] equals dot_q6_k_rows<1> on row a bit for bit.
template <int NA>
void dot_q6_k_acts(const uint8_t* w, const uint8_t* act, int64_t act_stride, int64_t n_blocks,
                   float* out) {
  const auto* x = reinterpret_cast<const BlockQ6_K*>(w);
  const BlockQ8_K* y[NA];
  for (int a = 0; a < NA; ++a) y[a] = reinterpret_cast<const BlockQ8_K*>(act + a * act_stride);
  const __m256i m32 = _mm256_set1_epi8(32);
  __m256 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
    __m256i sumi[NA];
    for (int a = 0; a < NA; ++a) sumi[a] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      q6_groups(x[b].ql + 64 * half, x[b].qh + 32 * half, q);
      for (int k = 0; k < 4; ++k) {
        const __m256i sc16 = q6_scales(scales, 8 * half + 2 * k);
        for (int a = 0; a < NA; ++a) {
          const __m256i a8 = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(y[a][b].qs + 128 * half + 32 * k));
          const __m256i p16 =
              _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], a8), _mm256_maddubs_epi16(m32, a8));
          sumi[a] = dot_s16(sumi[a], sc16, p16);
        }
      }
    }
    const float dx = f16(x[b].d);
    for (int a = 0; a < NA; ++a)
      acc[a] = _mm256_fmadd_ps(_mm256_set1_ps(y[a][b].d * dx), _mm256_cvtepi32_ps(sumi[a]), acc[a]);
  }
  for (int a = 0; a < NA; ++a) out[a] = hsum(acc[a]);
}

// One row (the QuantKernel::dot form) and four rows (dot4) of a kernel.
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
  with_act_rows<kDotActsMaxYmm>(na, [&](auto rows) {
    dot_k_nibbles_acts<rows(), BlockQ4_K, false>(static_cast<const uint8_t*>(w),
                                                 static_cast<const uint8_t*>(act), act_stride,
                                                 n_blocks, out);
  });
}
void dot_acts_q5_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) {
  with_act_rows<kDotActsMaxYmm>(na, [&](auto rows) {
    dot_k_nibbles_acts<rows(), BlockQ5_K, true>(static_cast<const uint8_t*>(w),
                                                static_cast<const uint8_t*>(act), act_stride,
                                                n_blocks, out);
  });
}
void dot_acts_q6_k(const void* w, const void* act, int64_t act_stride, int64_t n_blocks, int na,
                   float* out) {
  with_act_rows<kDotActsMaxYmm>(na, [&](auto rows) {
    dot_q6_k_acts<rows()>(static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(act),
                          act_stride, n_blocks, out);
  });
}

}  // namespace specstack::cpu::SS_QUANT_AVX2_NS
#endif  // SS_QUANT_AVX2

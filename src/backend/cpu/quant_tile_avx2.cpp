// AVX2 register tiles of the int8 GEMM (quant_gemm.h) for the 32-blocks
// (Q8_0, Q4_0, Q5_0): kTileW weight rows x kTileC activation rows per pass
// over the blocks, every output equal bit for bit to quant_avx2::dot_q8_0 /
// dot_q4_0 / dot_q5_0 for its (weight row, activation row). The one-row kernel adds even blocks
// into acc[0] and odd blocks into acc[1] (two chains, so consecutive FMAs do not wait on each
// other) and returns hsum(acc[0] + acc[1]); the two chains are independent, so this tile runs the
// even blocks for all pairs, then the odd ones, which keeps kTileW * kTileC accumulators live
// instead of twice that: 16 ymm registers hold 8 accumulators, 2 activation blocks, one weight
// block and its absolute value, the int16 ones and temporaries. Per (pair, block) the same integer
// steps (maddubs of |w| and sign(a, w), madd with ones) and the same f32 steps (the scale product
// f16(w.d) * f16(a.d), one FMA) as the one-row kernel; a Q4_0 / Q5_0 block is unpacked to signed
// bytes once for kTileC activation rows (the same bytes as there: the integer sums are exact).
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"

namespace specstack::cpu::quant_avx2 {
namespace {

using namespace quant;

constexpr int kTileW = 4;  // weight rows
constexpr int kTileC = 2;  // activation rows

inline float f16(uint16_t bits) {
  return _cvtsh_ss(bits);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// A 32-block's values as signed bytes, as quant_kernels_avx2.cpp.
inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}
inline __m256i bits_32(const uint8_t* p) {  // byte j = 0xFF where bit j is set
  uint32_t x;
  std::memcpy(&x, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101,
                                         0x0000000000000000);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}
inline __m256i values(const BlockQ8_0& b) {
  return load256(b.qs);
}
inline __m256i values(const BlockQ4_0& b) {
  return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
}
inline __m256i values(const BlockQ5_0& b) {  // nibble | (bit ? 0 : 0xF0)
  return _mm256_or_si256(nibbles_32(b.qs),
                         _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(char(0xF0))));
}

// acc[r][c] += Σ over blocks b = first, first + 2, ... of d_w d_a Σ_j w_j a_j.
template <typename Block>
inline void chain(const Block* const* x, const BlockQ8_0* const* y, int64_t first, int64_t n_blocks,
                  __m256 (&acc)[kTileW][kTileC]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = first; b < n_blocks; b += 2) {
    __m256i q8[kTileC];
    __m256 dy[kTileC];
    for (int c = 0; c < kTileC; ++c)
      q8[c] = load256(y[c][b].qs), dy[c] = _mm256_set1_ps(f16(y[c][b].d));
    for (int r = 0; r < kTileW; ++r) {
      const __m256i xv = values(x[r][b]);
      const __m256i ax = _mm256_sign_epi8(xv, xv);
      const __m256 dx = _mm256_set1_ps(f16(x[r][b].d));
      for (int c = 0; c < kTileC; ++c) {
        const __m256i p16 = _mm256_maddubs_epi16(ax, _mm256_sign_epi8(q8[c], xv));
        // f16(w.d) * f16(a.d) in every lane: the one-row kernel's scalar
        // product, one vector multiply here instead of a multiply and a broadcast.
        const __m256 d = _mm256_mul_ps(dx, dy[c]);
        acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_madd_epi16(ones, p16)), acc[r][c]);
      }
    }
  }
}

template <typename Block>
void tile_32(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
             float* out, int64_t out_stride) {
  const Block* x[kTileW];
  const BlockQ8_0* y[kTileC];
  for (int r = 0; r < kTileW; ++r)
    x[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * w_stride);
  for (int c = 0; c < kTileC; ++c)
    y[c] = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + c * a_stride);
  __m256 even[kTileW][kTileC], odd[kTileW][kTileC];
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c) even[r][c] = odd[r][c] = _mm256_setzero_ps();
  chain(x, y, 0, n_blocks, even);
  chain(x, y, 1, n_blocks, odd);
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c)
      out[c * out_stride + r] = hsum(_mm256_add_ps(even[r][c], odd[r][c]));
}

}  // namespace

int tile_32_rows() {
  return kTileW;
}
int tile_32_cols() {
  return kTileC;
}
void tile_q8_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
               float* out, int64_t out_stride) {
  tile_32<BlockQ8_0>(w, w_stride, a, a_stride, n_blocks, out, out_stride);
}
void tile_q4_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
               float* out, int64_t out_stride) {
  tile_32<BlockQ4_0>(w, w_stride, a, a_stride, n_blocks, out, out_stride);
}
void tile_q5_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
               float* out, int64_t out_stride) {
  tile_32<BlockQ5_0>(w, w_stride, a, a_stride, n_blocks, out, out_stride);
}

}  // namespace specstack::cpu::quant_avx2
#endif  // SS_QUANT_AVX2

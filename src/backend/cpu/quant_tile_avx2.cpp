// AVX2 register tile of the Q8_0 int8 GEMM (quant_gemm.h): kTileW weight
// rows x kTileC activation rows per pass over the blocks, every output
// equal bit for bit to quant_avx2::dot_q8_0 for its (weight row, activation
// row). The one-row kernel adds even blocks into acc[0] and odd blocks into
// acc[1] (two chains, so consecutive FMAs do not wait on each other) and
// returns hsum(acc[0] + acc[1]); the two chains are independent, so this
// tile runs the even blocks for all pairs, then the odd ones, which keeps
// kTileW * kTileC accumulators live instead of twice that: 16 ymm registers
// hold 8 accumulators, 2 activation blocks, one weight block and its
// absolute value, the int16 ones and temporaries. Per (pair, block) the same
// integer steps (maddubs of |w| and sign(a, w), madd with ones) and the same
// f32 steps (the scale product f16(w.d) * f16(a.d), one FMA) as dot_q8_0.
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>

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

// acc[r][c] += Σ over blocks b = first, first + 2, ... of d_w d_a Σ_j w_j a_j.
inline void chain(const BlockQ8_0* const* x, const BlockQ8_0* const* y, int64_t first,
                  int64_t n_blocks, __m256 (&acc)[kTileW][kTileC]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = first; b < n_blocks; b += 2) {
    __m256i q8[kTileC];
    __m256 dy[kTileC];
    for (int c = 0; c < kTileC; ++c)
      q8[c] = load256(y[c][b].qs), dy[c] = _mm256_set1_ps(f16(y[c][b].d));
    for (int r = 0; r < kTileW; ++r) {
      const __m256i xv = load256(x[r][b].qs);
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

}  // namespace

int tile_q8_0_rows() {
  return kTileW;
}
int tile_q8_0_cols() {
  return kTileC;
}

void tile_q8_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
               float* out, int64_t out_stride) {
  const BlockQ8_0* x[kTileW];
  const BlockQ8_0* y[kTileC];
  for (int r = 0; r < kTileW; ++r)
    x[r] = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * w_stride);
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

}  // namespace specstack::cpu::quant_avx2
#endif  // SS_QUANT_AVX2

// The Q4_0 decode kernels on prepared activations (quant_blocks.h Q4_0Act),
// AVX-512 VNNI: the AVX2 twin's pair step (quant_q4_0_avx2.cpp) in one
// 512-bit vector, the same floats bit for bit (hence the same as
// quant_kernels_avx2.cpp's dot_q4_0 and this isa's dot_q4_0). A pair of
// weight blocks is [low nibbles of both | high nibbles of both], the
// prepared activations are in that order, so one vpdpbusd (unsigned nibbles
// x signed activations, four products per int32 lane) started at the
// activations' -8 Σa lanes gives the AVX2 twin's [lo | hi] integers, where
// the one-block VNNI kernel spends movepi8_mask + masked negate + abs +
// vpdpbusd and an 8-subtract per block. The f32 accumulator is [lo | hi]
// of the AVX2 twin, FMA for FMA. Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni and only called after CPUID and XGETBV say so.
#if SS_QUANT_AVX512  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_simd_avx512.h"

namespace specstack::cpu::quant_avx512vnni {
namespace {

using namespace quant;
using namespace simd;

// [f16(d0) f16(da0) x 4 | f16(d1) f16(da1) x 4] twice: the AVX2 twin's pair
// scales for both 256-bit halves.
inline __m512 pair_scales(const BlockQ4_0* x, const float* da) {
  const __m128 dw = pair_d(x);
  const __m128 dy = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(da)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0),
                               _mm512_castps128_ps512(_mm_mul_ps(dw, dy)));
}

// As the AVX2 twin: prefetch the pair of the rows of the next four-row pass.
inline void prefetch_pair(const BlockQ4_0* x, int64_t ahead) {
  const char* p = reinterpret_cast<const char*>(x) + ahead;
  _mm_prefetch(p, _MM_HINT_T0);
  _mm_prefetch(p + 2 * sizeof(BlockQ4_0) - 1, _MM_HINT_T0);
}

template <int R>
void dot_rows(const uint8_t* w, int64_t w_stride, const void* prep, int64_t n_blocks, float* out) {
  const Q4_0ActView a = q4_0_act_view(prep, n_blocks);
  const BlockQ4_0* x[R];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const BlockQ4_0*>(w + r * w_stride);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R];  // the AVX2 twin's [lo | hi]
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m512i av = _mm512_loadu_si512(a.qs + 32 * b);
    const __m512i off = _mm512_loadu_si512(a.off + 8 * b);
    for (int r = 0; r < R; ++r) {
      const BlockQ4_0* xb = x[r] + b;
      if constexpr (R > 1) prefetch_pair(xb, prefetch_ahead<BlockQ4_0>(b, n_blocks, R * w_stride));
      const __m256i q = pair_qs(xb);
      const __m512i nib = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
      const __m512i s = _mm512_dpbusd_epi32(off, nib, av);
      acc[r] = _mm512_fmadd_ps(pair_scales(xb, a.d + b), _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m256 lo = _mm512_castps512_ps256(acc[r]);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1));
    __m256 acc0 = _mm256_permute2f128_ps(lo, hi, 0x20);
    const __m256 acc1 = _mm256_permute2f128_ps(lo, hi, 0x31);
    if (b < n_blocks) {  // an odd last block, laid out as it is
      const __m256i nib = nibbles_32(x[r][b].qs);
      const __m256i s = _mm256_dpbusd_epi32(load256(a.off + 8 * b), nib, load256(a.qs + 32 * b));
      const __m256 d = _mm256_set1_ps(f16(x[r][b].d) * a.d[b]);
      acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc0);
    }
    out[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

}  // namespace

float dot_q4_0_prepared(const void* w, const void* prep, int64_t n_blocks) {
  float out;
  dot_rows<1>(static_cast<const uint8_t*>(w), 0, prep, n_blocks, &out);
  return out;
}

void dot4_q4_0_prepared(const void* w, int64_t w_stride, const void* prep, int64_t n_blocks,
                        float* out) {
  dot_rows<4>(static_cast<const uint8_t*>(w), w_stride, prep, n_blocks, out);
}

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

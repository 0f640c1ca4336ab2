// The Q8_0 panel kernel on AVX-VNNI (quant_panels.h): the AVX-512 VNNI
// kernel's steps (quant_panels_avx512.cpp) on two ymm halves of a panel,
// rows 0-7 and 8-15, so that every lane computes what that kernel's lane
// does, bit for bit: the same two vpdpbusd chains per activation row (one
// started at the block's -128 Σa), their integer sum, one convert, the
// product of the weight scale with the activation scale, one FMA from +0
// in block order: quant_blocksum.h's blocksum_dot_ref.
//
// Per block and half, the 8 weight vectors (32 bytes each: 4 values of 8
// rows, + 128) are loaded once for up to two activation rows: 16 ymm
// registers hold the 8 vectors, two rows' two accumulators per half and
// the chains (three or four rows of a pass run as two and one or two).
// There is no AVX2 form: maddubs would saturate the (q + 128) a pairs.
// Built with -mavx2 -mfma -mf16c -mavxvnni (CMakeLists.txt); only called
// after CPUID says so.
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace specstack::cpu::quant_avxvnni {
namespace {

constexpr int64_t kBlockBytes = 544;  // quant_panels.h kPanelBlockBytes
// Prefetch distance along a panel into L2, as the AVX-512 kernel (its
// comment says why).
constexpr int64_t kAheadBytes = 32 * kBlockBytes;

inline __m256i broadcast_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// NA (1 or 2) activation rows against P panels (panel_stride bytes apart)
// side by side; y[j * y_stride + 16 p + r] for row r of panel p, carried on
// from y when `accumulate`.
template <int NA, int P>
void panel_rows_n(const uint8_t* panel, int64_t panel_stride, int64_t n_blocks, const int8_t* aq,
                  int64_t aq_stride, const float* ad, const int32_t* ac, int64_t as_stride,
                  float* y, int64_t y_stride, bool accumulate) {
  __m256 acc[P][NA][2];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < NA; ++j)
      for (int h = 0; h < 2; ++h)
        acc[p][j][h] =
            accumulate ? _mm256_loadu_ps(y + j * y_stride + 16 * p + 8 * h) : _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int p = 0; p < P; ++p) {
      const uint8_t* blk = panel + p * panel_stride + b * kBlockBytes;
      for (int64_t line = 0; line < kBlockBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kAheadBytes + line), _MM_HINT_T2);
      for (int h = 0; h < 2; ++h) {
        __m256i wv[8];
        for (int k = 0; k < 8; ++k)
          wv[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 64 * k + 32 * h));
        const __m256 dw =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * h)));
        for (int j = 0; j < NA; ++j) {
          const int8_t* q = aq + j * aq_stride + 32 * b;
          __m256i s0 = _mm256_set1_epi32(ac[j * as_stride + b]);
          __m256i s1 = _mm256_setzero_si256();
          for (int k = 0; k < 8; k += 2) {
            s0 = _mm256_dpbusd_avx_epi32(s0, wv[k], broadcast_dword(q + 4 * k));
            s1 = _mm256_dpbusd_avx_epi32(s1, wv[k + 1], broadcast_dword(q + 4 * k + 4));
          }
          const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(ad[j * as_stride + b]));
          acc[p][j][h] =
              _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), acc[p][j][h]);
        }
      }
    }
  }
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < NA; ++j)
      for (int h = 0; h < 2; ++h) _mm256_storeu_ps(y + j * y_stride + 16 * p + 8 * h, acc[p][j][h]);
}

}  // namespace

void panel_rows(const uint8_t* panel, int64_t n_blocks, const int8_t* aq, int64_t aq_stride,
                const float* ad, const int32_t* ac, int64_t as_stride, int na, float* y,
                int64_t y_stride, bool accumulate) {
  // Two activation rows per pass over the panel's chunk (read again from
  // cache by the next pass).
  for (int j = 0; j < na; j += 2) {
    const int8_t* q = aq + j * aq_stride;
    const float* d = ad + j * as_stride;
    const int32_t* c = ac + j * as_stride;
    if (na - j >= 2) {
      panel_rows_n<2, 1>(panel, 0, n_blocks, q, aq_stride, d, c, as_stride, y + j * y_stride,
                         y_stride, accumulate);
    } else {
      panel_rows_n<1, 1>(panel, 0, n_blocks, q, aq_stride, d, c, as_stride, y + j * y_stride,
                         y_stride, accumulate);
    }
  }
}

void panel_rows_wide(const uint8_t* panels, int n_panels, int64_t n_blocks, const int8_t* aq,
                     const float* ad, const int32_t* ac, float* y) {
  const int64_t stride = n_blocks * kBlockBytes;
  switch (n_panels) {
    case 2:
      return panel_rows_n<1, 2>(panels, stride, n_blocks, aq, 0, ad, ac, 0, y, 0, false);
    case 4:
      return panel_rows_n<1, 4>(panels, stride, n_blocks, aq, 0, ad, ac, 0, y, 0, false);
    default:
      return panel_rows_n<1, 1>(panels, stride, n_blocks, aq, 0, ad, ac, 0, y, 0, false);
  }
}

}  // namespace specstack::cpu::quant_avxvnni
#endif  // SS_QUANT_AVX2

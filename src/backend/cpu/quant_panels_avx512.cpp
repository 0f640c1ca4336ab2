// The Q8_0 panel kernel on AVX-512 VNNI (quant_panels.h): one zmm lane per
// weight row of a 16-row panel.
//
// Per block: the panel's 8 weight vectors (64 bytes each: the same 4 values
// of the 16 rows, + 128) are loaded once, then for each activation row 8
// vpdpbusd against that row's 8 dwords broadcast, started at its block's
// -128 Σa, give the 16 rows' exact block sums (two chains of 4, added, so
// the adds' latency overlaps); one convert, the product of the 16 f16
// weight scales (converted once per block) with the row's activation scale,
// and one FMA into the row's 16-lane accumulator. That is the scalar
// reference's acc = fma(d_w * d_a, float(Σ q a), acc) per lane, from +0, in
// block order: the same floats bit for bit. Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni (CMakeLists.txt); only called after CPUID and
// XGETBV say so.
#if SS_QUANT_AVX512  // x86 builds only (CMakeLists.txt)
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_simd_avx512.h"  // immintrin.h, without GCC 12's false warnings

namespace specstack::cpu::quant_avx512vnni {
namespace {

constexpr int64_t kBlockBytes = 544;  // quant_panels.h kPanelBlockBytes
// Prefetch distance along a panel: 32 blocks (17 KB), into L2. One
// activation row is bound by how many lines a core has in flight: an L1
// prefetch holds one of the core's few fill buffers for a DRAM round trip,
// and 4 KB ahead into L1 streamed ~15-25% slower than the row kernels; into
// L2 from 17 KB ahead it draws with them (quant_matmul_bench, dev VM,
// session 28; docs/benchmarks.md).
constexpr int64_t kAheadBytes = 32 * kBlockBytes;

inline __m512i broadcast_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// P panels (panel_stride bytes apart) side by side: P sequential streams,
// so more cache lines are in flight than one stream's prefetcher keeps (the
// one-activation-row case is bound by memory, not by these ops). Each
// panel's floats are its own, as with P = 1.
template <int NA, int P>
void panel_rows_n(const uint8_t* panel, int64_t panel_stride, int64_t n_blocks, const int8_t* aq,
                  int64_t aq_stride, const float* ad, const int32_t* ac, int64_t as_stride,
                  float* y, int64_t y_stride, bool accumulate) {
  __m512 acc[P][NA];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < NA; ++j)
      acc[p][j] = accumulate ? _mm512_loadu_ps(y + j * y_stride + 16 * p) : _mm512_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int p = 0; p < P; ++p) {
      const uint8_t* blk = panel + p * panel_stride + b * kBlockBytes;
      // The block kAheadBytes on spans 9 lines; touch each once.
      for (int64_t line = 0; line < kBlockBytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk + kAheadBytes + line), _MM_HINT_T2);
      __m512i wv[8];
      for (int k = 0; k < 8; ++k) wv[k] = _mm512_loadu_si512(blk + 32 + 64 * k);
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
      for (int j = 0; j < NA; ++j) {
        const int8_t* q = aq + j * aq_stride + 32 * b;
        __m512i s0 = _mm512_set1_epi32(ac[j * as_stride + b]);
        __m512i s1 = _mm512_setzero_si512();
        for (int k = 0; k < 8; k += 2) {
          s0 = _mm512_dpbusd_epi32(s0, wv[k], broadcast_dword(q + 4 * k));
          s1 = _mm512_dpbusd_epi32(s1, wv[k + 1], broadcast_dword(q + 4 * k + 4));
        }
        const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(ad[j * as_stride + b]));
        acc[p][j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[p][j]);
      }
    }
  }
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < NA; ++j) _mm512_storeu_ps(y + j * y_stride + 16 * p, acc[p][j]);
}

}  // namespace

void panel_rows(const uint8_t* panel, int64_t n_blocks, const int8_t* aq, int64_t aq_stride,
                const float* ad, const int32_t* ac, int64_t as_stride, int na, float* y,
                int64_t y_stride, bool accumulate) {
  switch (na) {
    case 1:
      return panel_rows_n<1, 1>(panel, 0, n_blocks, aq, aq_stride, ad, ac, as_stride, y, y_stride,
                                    accumulate);
    case 2:
      return panel_rows_n<2, 1>(panel, 0, n_blocks, aq, aq_stride, ad, ac, as_stride, y, y_stride,
                                    accumulate);
    case 3:
      return panel_rows_n<3, 1>(panel, 0, n_blocks, aq, aq_stride, ad, ac, as_stride, y, y_stride,
                                    accumulate);
    default:
      return panel_rows_n<4, 1>(panel, 0, n_blocks, aq, aq_stride, ad, ac, as_stride, y, y_stride,
                                    accumulate);
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

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

// The block-sum int8 GEMM for Q8_0 prefill on AVX-512 VNNI
// (quant_blocksum.h): one weight row against 16 activation rows per zmm.
//
// Lane c of an accumulator belongs to activation row c of a group of 16;
// vpdpbusd adds, per lane, the 4 products of 4 activation bytes of that
// row with the same 4 weight bytes (a dword broadcast from the weight
// block as stored), so 8 of them give each lane its row's whole 32-value
// block sum in int32, exact. Then one convert, one product of the scales
// (the weight block's f32 scale, broadcast, times the 16 rows' activation
// scales) and one FMA per block: 11 vector ops per 16 x 32 multiply-adds,
// where the packed tiles (quant_tile_avx512.cpp), which keep the one-row
// kernel's 16 partial lanes per block pair to stay bit-equal to it, spend
// 4 per 2 x 32. The floats are those of quant_blocksum.h's scalar
// reference bit for bit (the same integer per block, the same product, the
// same FMA chain from +0), not those of the decode kernels.
//
// vpdpbusd multiplies unsigned by signed bytes: the activations are packed
// as a + 128 (u8) and each weight block's -128 Σw starts its lanes, so
// Σ (a + 128) w - 128 Σw = Σ a w exactly (the packing and the -128 Σw
// tables: quant_blocksum_avx2.cpp, shared with the AVX-VNNI tile). Built
// with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt) and
// only called after CPUID and XGETBV say so.
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

constexpr int kRows = 4;        // weight rows per register tile
constexpr int kGroups = 2;      // groups of 16 activation rows per register tile
constexpr int64_t kLanes = 16;  // activation rows per group
// Packed bytes of one group's block: 8 dwords k of 16 rows (k-major).
constexpr int64_t kGroupBlockBytes = 8 * 64;

// acc[r][g] (16 lanes: the rows of group g, against weight row r) carried
// over n_blocks more blocks: loaded from acc_io (or +0 when `first`), stored
// back. w points at block 0 of the chunk in weight row 0, corr / dw at its
// table entries, pa / pas at the chunk's block in group 0; groups are
// ga_stride bytes / gs_stride floats apart.
template <int R, int G>
void tile(const uint8_t* w, int64_t w_stride, const int32_t* corr, const float* dw,
          int64_t tab_stride, const uint8_t* pa, const float* pas, int64_t ga_stride,
          int64_t gs_stride, int64_t n_blocks, float* acc_io, bool first) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g)
      acc[r][g] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc_io + (r * G + g) * kLanes);
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m512i s[R][G];
    const int8_t* q[R];
    for (int r = 0; r < R; ++r) {
      q[r] = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride)[b].qs;
      const __m512i c = _mm512_set1_epi32(corr[r * tab_stride + b]);
      for (int g = 0; g < G; ++g) s[r][g] = c;
    }
    const uint8_t* ab = pa + b * kGroupBlockBytes;
    for (int k = 0; k < 8; ++k) {
      __m512i av[G];
      for (int g = 0; g < G; ++g) av[g] = _mm512_load_si512(ab + g * ga_stride + k * 64);
      for (int r = 0; r < R; ++r) {
        int32_t dword;
        std::memcpy(&dword, q[r] + 4 * k, 4);
        const __m512i wb = _mm512_set1_epi32(dword);
        for (int g = 0; g < G; ++g) s[r][g] = _mm512_dpbusd_epi32(s[r][g], av[g], wb);
      }
    }
    __m512 da[G];
    for (int g = 0; g < G; ++g) da[g] = _mm512_load_ps(pas + g * gs_stride + b * kLanes);
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_set1_ps(dw[r * tab_stride + b]);
      for (int g = 0; g < G; ++g)
        acc[r][g] =
            _mm512_fmadd_ps(_mm512_mul_ps(d, da[g]), _mm512_cvtepi32_ps(s[r][g]), acc[r][g]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(acc_io + (r * G + g) * kLanes, acc[r][g]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const int32_t*, const float*, int64_t,
                        const uint8_t*, const float*, int64_t, int64_t, int64_t, float*, bool);

template <int R, int G>
constexpr TileFn kTile = &tile<R, G>;

// kTiles[R - 1][G - 1]: the full tile and its ragged edges.
constexpr TileFn kTiles[kRows][kGroups] = {{kTile<1, 1>, kTile<1, 2>},
                                           {kTile<2, 1>, kTile<2, 2>},
                                           {kTile<3, 1>, kTile<3, 2>},
                                           {kTile<4, 1>, kTile<4, 2>}};
static_assert(kRows == 4 && kGroups == 2, "kTiles lists 1..kRows x 1..kGroups");

}  // namespace

int blocksum_tile_rows() {
  return kRows;
}
int blocksum_tile_groups() {
  return kGroups;
}

void blocksum_tile(const void* w, int64_t w_stride, const int32_t* corr, const float* dw,
                   int64_t tab_stride, const uint8_t* pa, const float* pas, int64_t ga_stride,
                   int64_t gs_stride, int64_t n_blocks, int rows, int groups, float* acc_io,
                   bool first) {
  kTiles[rows - 1][groups - 1](static_cast<const uint8_t*>(w), w_stride, corr, dw, tab_stride, pa,
                               pas, ga_stride, gs_stride, n_blocks, acc_io, first);
}

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

// The block-sum int8 GEMM's AVX2-level parts (quant_blocksum.h), built
// twice like the other AVX2 kernel files (quant_simd_avx2.h):
//  * the AVX2 build (quant_avx2): packing 16 activation rows per group (a
//    + 128 as u8, dword k of each row side by side) and the weight tables
//    (-128 Σw and the f32 scale per row and block), for the AVX-512 VNNI
//    tile (quant_blocksum_avx512.cpp) and this file's AVX-VNNI tile;
//  * the AVX-VNNI build (quant_avxvnni, SS_QUANT_VNNI256): the 256-bit
//    tile. A group of 16 activation rows is two ymm halves (lanes 0-7 and
//    8-15 of the 64 bytes of each dword k); per weight row and block, 16
//    VEX vpdpbusd against the broadcast weight dword give each lane its
//    row's 32-value block sum in int32, exact; then per half one convert,
//    one product of scales and one FMA, the AVX-512 tile's steps lane for
//    lane, so every output is blocksum_dot_ref's bit for bit. There is no
//    AVX2 tile: maddubs would saturate (a + 128) w pairs in int16.
// Only called after CPUID says the build's isa is there.
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

constexpr int64_t kLanes = 16;  // activation rows per group
// Packed bytes of one group's block: 8 dwords k of 16 rows (k-major).
constexpr int64_t kGroupBlockBytes = 8 * 64;

#if SS_QUANT_VNNI256
// Weight rows per register tile: R rows keep 4R accumulators (int32 block
// sums and f32 totals, two halves each) in the 16 ymm registers, with the
// group's two activation vectors and the broadcast weight dword.
constexpr int kRows = 3;

// acc[r][h] (lanes 8h .. 8h + 7 of the group, against weight row r) carried
// over n_blocks more blocks: loaded from acc_io (or +0 when `first`),
// stored back; the arguments as quant_blocksum_avx512.cpp's tile with one
// group.
template <int R>
void tile(const uint8_t* w, int64_t w_stride, const int32_t* corr, const float* dw,
          int64_t tab_stride, const uint8_t* pa, const float* pas, int64_t n_blocks, float* acc_io,
          bool first) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h)
      acc[r][h] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc_io + r * kLanes + 8 * h);
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i s[R][2];
    const int8_t* q[R];
    for (int r = 0; r < R; ++r) {
      q[r] = reinterpret_cast<const BlockQ8_0*>(w + r * w_stride)[b].qs;
      s[r][0] = s[r][1] = _mm256_set1_epi32(corr[r * tab_stride + b]);
    }
    const uint8_t* ab = pa + b * kGroupBlockBytes;
    for (int k = 0; k < 8; ++k) {
      const __m256i a0 = load256(ab + k * 64), a1 = load256(ab + k * 64 + 32);
      for (int r = 0; r < R; ++r) {
        int32_t dword;
        std::memcpy(&dword, q[r] + 4 * k, 4);
        const __m256i wb = _mm256_set1_epi32(dword);
        s[r][0] = _mm256_dpbusd_avx_epi32(s[r][0], a0, wb);
        s[r][1] = _mm256_dpbusd_avx_epi32(s[r][1], a1, wb);
      }
    }
    const __m256 da0 = _mm256_load_ps(pas + b * kLanes), da1 = _mm256_load_ps(pas + b * kLanes + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 d = _mm256_set1_ps(dw[r * tab_stride + b]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(d, da0), _mm256_cvtepi32_ps(s[r][0]), acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(d, da1), _mm256_cvtepi32_ps(s[r][1]), acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) _mm256_storeu_ps(acc_io + r * kLanes + 8 * h, acc[r][h]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const int32_t*, const float*, int64_t,
                        const uint8_t*, const float*, int64_t, float*, bool);
// kTiles[R - 1]: the full tile and its ragged edges.
constexpr TileFn kTiles[kRows] = {&tile<1>, &tile<2>, &tile<3>};
static_assert(kRows == 3, "kTiles lists 1..kRows");
#endif

}  // namespace

#if SS_QUANT_VNNI256
int blocksum_tile_rows() {
  return kRows;
}
int blocksum_tile_groups() {
  return 1;
}

void blocksum_tile(const void* w, int64_t w_stride, const int32_t* corr, const float* dw,
                   int64_t tab_stride, const uint8_t* pa, const float* pas, int64_t ga_stride,
                   int64_t gs_stride, int64_t n_blocks, int rows, int groups, float* acc_io,
                   bool first) {
  (void)ga_stride, (void)gs_stride, (void)groups;  // one group per tile
  kTiles[rows - 1](static_cast<const uint8_t*>(w), w_stride, corr, dw, tab_stride, pa, pas,
                   n_blocks, acc_io, first);
}
#else
void blocksum_pack_act(const void* act, int64_t act_stride, int64_t n_rows, int64_t n_blocks,
                       uint8_t* out, float* out_scales) {
  // One group: rows past n_rows are a = 0 (u8 128) with scale 0.
  const auto* base = static_cast<const uint8_t*>(act);
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t* o = reinterpret_cast<uint32_t*>(out + b * kGroupBlockBytes);
    float* s = out_scales + b * kLanes;
    for (int64_t c = 0; c < kLanes; ++c) {
      if (c < n_rows) {
        const auto& blk = reinterpret_cast<const BlockQ8_0*>(base + c * act_stride)[b];
        s[c] = f16(blk.d);
        for (int k = 0; k < 8; ++k) {
          uint32_t v;
          std::memcpy(&v, blk.qs + 4 * k, 4);
          o[k * kLanes + c] = v ^ 0x80808080u;
        }
      } else {
        s[c] = 0.0f;
        for (int k = 0; k < 8; ++k) o[k * kLanes + c] = 0x80808080u;
      }
    }
  }
}

void blocksum_weight_tables(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks,
                            int32_t* corr, float* dw) {
  const __m256i flip = _mm256_set1_epi8(char(0x80));
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* x =
        reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(w) + r * w_stride);
    for (int64_t b = 0; b < n_blocks; ++b) {
      // Σ (w + 128) over the 32 bytes, 4 partial sums of 8 (vpsadbw).
      const __m256i sad =
          _mm256_sad_epu8(_mm256_xor_si256(load256(x[b].qs), flip), _mm256_setzero_si256());
      const __m128i s2 =
          _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
      const int64_t sum_u = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
      corr[r * n_blocks + b] = int32_t(-128 * (sum_u - 32 * 128));
      dw[r * n_blocks + b] = f16(x[b].d);
    }
  }
}
#endif

}  // namespace specstack::cpu::SS_QUANT_AVX2_NS
#endif  // SS_QUANT_AVX2

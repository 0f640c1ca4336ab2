// AVX-512 VNNI register tiles of the int8 GEMM (quant_gemm.h) for the
// 32-blocks (Q8_0, Q4_0, Q5_0), on operands packed once per call
// (QuantTile::pack_w / pack_a / fn_packed): kTileW weight rows x kTileC
// activation rows per pass over the block pairs, every output equal bit for
// bit to quant_avx512vnni::dot_q8_0 / dot_q4_0 / dot_q5_0 for its (weight
// row, activation row).
//
// What the one-row kernel computes, per block pair b, b + 1: the int32
// lanes Σ of 4 products w_j a_j (block b in lanes 0-7, b + 1 in 8-15,
// exact), times [f16(w.d) f16(a.d) of b x 8 | of b + 1 x 8] (each a product
// of the same two floats), added by one FMA into a 16-lane accumulator;
// an odd last block into the low half on 256 bits; then hsum(low + high).
// Per (pair, block pair) that is a dot, a convert, a scale product and an
// FMA. The packing makes those four ops all the tile does per pair:
//
// * The two blocks' bytes are interleaved in 4-byte groups (group k of
//   block b, then group k of b + 1, ...), so lane 2k holds the low half's
//   lane k and lane 2k + 1 the high half's, and a block pair's scales are
//   two adjacent floats [s_b, s_b+1]: one 64-bit broadcast gives the lane
//   pattern, where the unpacked form needed two broadcasts and a blend.
//   Each lane still sees the same sequence of FMAs; the final permute puts
//   the lanes back before hsum(low + high).
// * vpdpbusd multiplies unsigned by signed bytes: the weights are packed as
//   w + 128 (u8), and each activation block pair carries its correction
//   -128 Σ a_j per lane as the dot's starting value:
//   -128 Σ a_j + Σ (w_j + 128) a_j = Σ w_j a_j, exactly (no lane leaves
//   int32). The correction belongs to the activations (packed once per
//   call) rather than to the weights (once per cache tile), so no tile pays
//   for it.
// * Q4_0 / Q5_0 nibbles are unpacked to bytes once per call, not per tile.
// * An odd last block is packed as a pair with a zero partner (values and
//   scale 0): the high lanes get fma(0, 0, acc) = acc (acc is never -0: it
//   starts at +0 and a rounded sum is -0 only if both addends are), the
//   low lanes the one-row kernel's tail FMA.
//
// 5 x 3 fits the 32 zmm registers: 15 accumulators, 3 activation pairs, 3
// corrections, 3 scale vectors, the weight pair, its scales, 2 temporaries.
#if SS_QUANT_AVX512  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_simd_avx512.h"

namespace specstack::cpu::quant_avx512vnni {
namespace {

using namespace quant;
using namespace simd;

constexpr int kTileW = 5;  // weight rows
constexpr int kTileC = 3;  // activation rows
// Packed bytes per block pair: weights 64 (w + 128); activations 64 (a) +
// 16 int32 corrections.
constexpr int64_t kPairW = 64;
constexpr int64_t kPairA = 128;

// [lo | hi] with their 4-byte groups interleaved: lane 2k = lo's k, 2k + 1 = hi's k.
inline __m512i interleave(__m256i lo, __m256i hi) {
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  return _mm512_permutexvar_epi32(
      _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0), v);
}

// The inverse on an accumulator: even lanes to the low half, odd to the high.
inline __m512 deinterleave(__m512 v) {
  return _mm512_permutexvar_ps(
      _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0), v);
}

// [s, s'] of a block pair in every 64-bit lane.
inline __m512 pair_scales(const float* s) {
  double d;
  std::memcpy(&d, s, sizeof d);
  return _mm512_castpd_ps(_mm512_set1_pd(d));
}

// n_rows rows of n_blocks Blocks (row_stride bytes apart) into packed rows of
// n_pairs block pairs: bytes (values interleaved, then `post`), scales
// [s_2p, s_2p+1] as f32, the missing partner of an odd last block zero.
template <typename Block, typename Post>
void pack_rows(const void* rows, int64_t row_stride, int64_t n_rows, int64_t n_blocks,
               int64_t pair_bytes, uint8_t* out, float* scales, Post post) {
  const int64_t n_pairs = (n_blocks + 1) / 2;
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* x =
        reinterpret_cast<const Block*>(static_cast<const uint8_t*>(rows) + r * row_stride);
    uint8_t* o = out + r * n_pairs * pair_bytes;
    float* s = scales + r * 2 * n_pairs;
    for (int64_t p = 0; p < n_pairs; ++p) {
      const int64_t b = 2 * p;
      const bool pair = b + 1 < n_blocks;
      const __m512i v = interleave(values(x[b]), pair ? values(x[b + 1]) : _mm256_setzero_si256());
      post(v, o + p * pair_bytes);
      s[2 * p] = f16(x[b].d);
      s[2 * p + 1] = pair ? f16(x[b + 1].d) : 0.0f;
    }
  }
}

template <typename Block>
void pack_w(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
            float* scales) {
  pack_rows<Block>(w, w_stride, n_rows, n_blocks, kPairW, out, scales,
                   [](__m512i v, uint8_t* o) {  // w + 128 as u8
                     _mm512_storeu_si512(o, _mm512_xor_si512(v, _mm512_set1_epi8(char(0x80))));
                   });
}

void pack_a(const void* a, int64_t a_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
            float* scales) {
  pack_rows<BlockQ8_0>(a, a_stride, n_rows, n_blocks, kPairA, out, scales,
                       [](__m512i v, uint8_t* o) {  // a, then -128 Σ a per lane
                         const __m512i zero = _mm512_setzero_si512();
                         const __m512i sum128 =
                             _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(char(0x80)), v);
                         _mm512_storeu_si512(o, v);
                         _mm512_storeu_si512(o + 64, _mm512_sub_epi32(zero, sum128));
                       });
}

// out[c * out_stride + r] for R packed weight rows x C packed activation rows.
template <int R, int C>
void tile_packed(const uint8_t* pw, const float* pws, const uint8_t* pa, const float* pas,
                 int64_t n_pairs, float* out, int64_t out_stride) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t p = 0; p < n_pairs; ++p) {
    __m512i av[C], corr[C];
    __m512 dy[C];
    for (int c = 0; c < C; ++c) {
      const uint8_t* ap = pa + (c * n_pairs + p) * kPairA;
      av[c] = _mm512_loadu_si512(ap);
      corr[c] = _mm512_loadu_si512(ap + 64);
      dy[c] = pair_scales(pas + c * 2 * n_pairs + 2 * p);
    }
    for (int r = 0; r < R; ++r) {
      const __m512i wv = _mm512_loadu_si512(pw + (r * n_pairs + p) * kPairW);
      const __m512 dx = pair_scales(pws + r * 2 * n_pairs + 2 * p);
      for (int c = 0; c < C; ++c) {
        const __m512i dot = _mm512_dpbusd_epi32(corr[c], wv, av[c]);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[c]), _mm512_cvtepi32_ps(dot), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      const __m512 v = deinterleave(acc[r][c]);
      const __m256 lo = _mm512_castps512_ps256(v);
      const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
      out[c * out_stride + r] = hsum(_mm256_add_ps(lo, hi));
    }
  }
}

using PackedFn = void (*)(const uint8_t*, const float*, const uint8_t*, const float*, int64_t,
                          float*, int64_t);

// kTiles[R - 1][C - 1] = tile_packed<R, C>: the full tile and every ragged edge.
template <int... Rs, int... Cs>
constexpr auto make_tiles(std::integer_sequence<int, Rs...>, std::integer_sequence<int, Cs...>) {
  struct Table {
    PackedFn fn[sizeof...(Rs)][sizeof...(Cs)];
  } t{};
  auto row = [&]<int R>() { ((t.fn[R - 1][Cs - 1] = &tile_packed<R, Cs>), ...); };
  (row.template operator()<Rs>(), ...);
  return t;
}
constexpr auto kTiles =
    make_tiles(std::integer_sequence<int, 1, 2, 3, 4, 5>{}, std::integer_sequence<int, 1, 2, 3>{});
static_assert(kTileW == 5 && kTileC == 3, "kTiles lists 1..kTileW x 1..kTileC");

}  // namespace

int tile_32_rows() {
  return kTileW;
}
int tile_32_cols() {
  return kTileC;
}
int64_t packed_w_pair_bytes() {
  return kPairW;
}
int64_t packed_a_pair_bytes() {
  return kPairA;
}
void pack_w_q8_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales) {
  pack_w<BlockQ8_0>(w, w_stride, n_rows, n_blocks, out, scales);
}
void pack_w_q4_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales) {
  pack_w<BlockQ4_0>(w, w_stride, n_rows, n_blocks, out, scales);
}
void pack_w_q5_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales) {
  pack_w<BlockQ5_0>(w, w_stride, n_rows, n_blocks, out, scales);
}
void pack_act_q8_0(const void* a, int64_t a_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                   float* scales) {
  pack_a(a, a_stride, n_rows, n_blocks, out, scales);
}
void tile_packed_32(const uint8_t* pw, const float* pws, const uint8_t* pa, const float* pas,
                    int64_t n_pairs, int rows, int cols, float* out, int64_t out_stride) {
  kTiles.fn[rows - 1][cols - 1](pw, pws, pa, pas, n_pairs, out, out_stride);
}

// The self-contained form: the tile's rows packed here, per call (new[]
// rather than a std::vector, whose inline code would be compiled with
// AVX-512 in this file).
#define SS_TILE(name, pack)                                                                     \
  void name(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks, \
            float* out, int64_t out_stride) {                                                   \
    const int64_t n_pairs = (n_blocks + 1) / 2;                                                 \
    uint8_t* pw = new uint8_t[size_t(n_pairs * (kTileW * kPairW + kTileC * kPairA))];           \
    uint8_t* pa = pw + n_pairs * kTileW * kPairW;                                               \
    float* s = new float[size_t(2 * n_pairs * (kTileW + kTileC))];                              \
    float* as = s + 2 * n_pairs * kTileW;                                                       \
    pack(w, w_stride, kTileW, n_blocks, pw, s);                                                 \
    pack_a(a, a_stride, kTileC, n_blocks, pa, as);                                              \
    tile_packed<kTileW, kTileC>(pw, s, pa, as, n_pairs, out, out_stride);                       \
    delete[] s;                                                                                 \
    delete[] pw;                                                                                \
  }
SS_TILE(tile_q8_0, pack_w<BlockQ8_0>)
SS_TILE(tile_q4_0, pack_w<BlockQ4_0>)
SS_TILE(tile_q5_0, pack_w<BlockQ5_0>)
#undef SS_TILE

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

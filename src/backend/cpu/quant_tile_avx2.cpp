// AVX2 register tiles of the int8 GEMM (quant_gemm.h) for the 32-blocks
// (Q8_0, Q4_0, Q5_0): kTileW weight rows x kTileC activation rows per pass
// over the blocks, every output equal bit for bit to quant_avx2::dot_q8_0 /
// dot_q4_0 / dot_q5_0 for its (weight row, activation row). The one-row
// kernel adds even blocks into acc[0] and odd blocks into acc[1] (two chains,
// so consecutive FMAs do not wait on each other) and returns
// hsum(acc[0] + acc[1]); the two chains are independent, so this tile runs
// the even blocks for all pairs, then the odd ones, which keeps
// kTileW * kTileC accumulators live instead of twice that.
//
// Per (pair, block) only what cannot be shared is left: the integer dot
// (sign(a, w), maddubs with |w|, madd with ones: the one-row kernel's exact
// int32 lanes), the int-to-float convert, a broadcast load of the scale
// product and one FMA. The scales arrive as f32, converted once per cache
// tile (weights) and per call (activations) by matmul_quant_tiled
// (QuantTile::fn_scaled), and the kTileW x kTileC products f16(w.d) *
// f16(a.d) of a block come from one vector multiply (the same two floats,
// the same product) into a table per chunk of kChunk blocks, which the
// FMAs broadcast from. Done per tile as the one-row kernel does it (two
// f16 converts, a product and a broadcast per pair), the scale work was two
// thirds as many instructions as the dots' (counted in the object code; the tile's time
// follows its instruction count, docs/benchmarks.md "session 24: int8 tiles,
// faster"). Chunks also keep the tile's blocks in L1 between the even and
// the odd pass (6 rows x 32 blocks = 6.5 KB for Q8_0). A Q4_0 / Q5_0 block
// is unpacked to signed bytes once for kTileC activation rows (the same
// bytes as there: the integer sums are exact).
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

constexpr int kTileW = 4;  // weight rows
constexpr int kTileC = 2;  // activation rows

// Blocks per chunk (even, so that a chunk's even blocks are the row's).
constexpr int64_t kChunk = 32;
constexpr int kPairs = kTileW * kTileC;
static_assert(kTileW == 4 && kTileC == 2, "the products are built 4 x 2 per vector");
static_assert(kChunk % 2 == 0);

// prod[i * kPairs + c * kTileW + r] = ws_r * as_c of block b0 + i (ws
// block-major, as row-major: QuantTile::fn_scaled): one
// vector multiply per block, [w_0 .. w_3 | w_0 .. w_3] * [a_0 x 4 | a_1 x 4].
inline void scale_products(const float* ws, int64_t ws_stride, const float* as, int64_t as_stride,
                           int64_t b0, int64_t nb, float* prod) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* w4 = ws + (b0 + i) * ws_stride;
    const __m256 wv = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(w4));
    const __m256 av =
        _mm256_set_m128(_mm_broadcast_ss(as + as_stride + b0 + i), _mm_broadcast_ss(as + b0 + i));
    _mm256_store_ps(prod + i * kPairs, _mm256_mul_ps(wv, av));
  }
}

// acc[r][c] += Σ over blocks b = b0 + first, b0 + first + 2, ... < b0 + nb
// of d_w d_a Σ_j w_j a_j, the products from `prod` (scale_products).
template <typename Block>
inline void chain(const Block* const* x, const BlockQ8_0* const* y, const float* prod, int64_t b0,
                  int64_t nb, int first, __m256 (&acc_io)[kTileW][kTileC]) {
  // A local copy: with acc_io itself GCC stored all 8 accumulators every iteration.
  __m256 acc[kTileW][kTileC];
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c) acc[r][c] = acc_io[r][c];
  for (int64_t i = first; i < nb; i += 2) {
    const int64_t b = b0 + i;
    const float* p = prod + i * kPairs;
    for (int r = 0; r < kTileW; ++r) {
      const __m256i xv = values(x[r][b]);
      const __m256i ax = _mm256_sign_epi8(xv, xv);
      for (int c = 0; c < kTileC; ++c) {
        const __m256i s32 =
            dot_u8s8(_mm256_setzero_si256(), ax, _mm256_sign_epi8(load256(y[c][b].qs), xv));
        const __m256 d = _mm256_broadcast_ss(p + c * kTileW + r);
        acc[r][c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s32), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c) acc_io[r][c] = acc[r][c];
}

template <typename Block>
void tile_32(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride, const void* a,
             int64_t a_stride, const float* as, int64_t as_stride, int64_t n_blocks, float* out,
             int64_t out_stride) {
  const Block* x[kTileW];
  const BlockQ8_0* y[kTileC];
  for (int r = 0; r < kTileW; ++r)
    x[r] = reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * w_stride);
  for (int c = 0; c < kTileC; ++c)
    y[c] = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + c * a_stride);
  __m256 even[kTileW][kTileC], odd[kTileW][kTileC];
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c) even[r][c] = odd[r][c] = _mm256_setzero_ps();
  alignas(32) float prod[kChunk * kPairs];
  for (int64_t b0 = 0; b0 < n_blocks; b0 += kChunk) {
    const int64_t nb = n_blocks - b0 < kChunk ? n_blocks - b0 : kChunk;
    scale_products(ws, ws_stride, as, as_stride, b0, nb, prod);
    chain(x, y, prod, b0, nb, 0, even);
    chain(x, y, prod, b0, nb, 1, odd);
  }
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
void scales_32(const void* rows, int64_t row_stride, int64_t n_rows, int64_t block_bytes,
               int64_t n_blocks, float* out, int64_t out_row_stride, int64_t out_block_stride) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(rows) + r * row_stride;
    for (int64_t b = 0; b < n_blocks; ++b) {
      uint16_t d;  // every 32-block (and Q8_0 activation block) starts with its f16 scale
      std::memcpy(&d, row + b * block_bytes, sizeof d);
      out[r * out_row_stride + b * out_block_stride] = _cvtsh_ss(d);
    }
  }
}
#define SS_TILE_SCALED(name, Block)                                                             \
  void name(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride, const void* a, \
            int64_t a_stride, const float* as, int64_t as_stride, int64_t n_blocks, float* out, \
            int64_t out_stride) {                                                               \
    tile_32<Block>(w, w_stride, ws, ws_stride, a, a_stride, as, as_stride, n_blocks, out,       \
                   out_stride);                                                                 \
  }
// The self-contained form: the tile's scales converted here, per call
// (new[] rather than a std::vector, whose inline code would be compiled
// with -mavx2 in this file).
#define SS_TILE(name, scaled, Block)                                                            \
  SS_TILE_SCALED(scaled, Block)                                                                 \
  void name(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks, \
            float* out, int64_t out_stride) {                                                   \
    float* s = new float[size_t((kTileW + kTileC) * n_blocks)];                                 \
    float* as = s + kTileW * n_blocks;                                                          \
    scales_32(w, w_stride, kTileW, sizeof(Block), n_blocks, s, 1, kTileW);                      \
    scales_32(a, a_stride, kTileC, sizeof(BlockQ8_0), n_blocks, as, n_blocks, 1);               \
    scaled(w, w_stride, s, kTileW, a, a_stride, as, n_blocks, n_blocks, out, out_stride);       \
    delete[] s;                                                                                 \
  }
SS_TILE(tile_q8_0, tile_scaled_q8_0, BlockQ8_0)
SS_TILE(tile_q4_0, tile_scaled_q4_0, BlockQ4_0)
SS_TILE(tile_q5_0, tile_scaled_q5_0, BlockQ5_0)
#undef SS_TILE
#undef SS_TILE_SCALED

}  // namespace specstack::cpu::SS_QUANT_AVX2_NS
#endif  // SS_QUANT_AVX2

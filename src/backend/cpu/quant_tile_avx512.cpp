// AVX-512 VNNI register tiles of the int8 GEMM (quant_gemm.h) for the
// 32-blocks (Q8_0, Q4_0, Q5_0): kTileW weight rows x kTileC activation rows
// per pass over the blocks, llamafile's tinyBLAS shape (4 x 3) for 32 zmm
// registers: 12 accumulators, 3 activation block pairs and their 3 scale
// vectors, one weight block pair, its correction and scales, temporaries.
// Every output equals quant_avx512vnni::dot_q8_0 / dot_q4_0 / dot_q5_0 bit
// for bit for its (weight row, activation row): blocks b, b + 1 in the low /
// high halves of one accumulator, the same int32 lanes (Σ of 4 products
// w_j a_j, exact), the scale products f16(w.d) * f16(a.d) per half (a
// vector product of the same two floats), one FMA per block pair, the odd
// last block into the low half on 256 bits, then hsum(low + high). Only the
// order in which pairs are visited differs.
//
// The int32 lanes come from one vpdpbusd per (pair, block pair): vpdpbusd
// multiplies unsigned by signed bytes, so the activations go in as
// a + 128 (a ^ 0x80, once per activation block pair for kTileW weight rows)
// and the weights as they are, and the accumulator starts at -128 Σ w_j per
// lane (once per weight block pair for kTileC activation rows):
// Σ (a_j + 128) w_j - 128 Σ w_j = Σ a_j w_j, exactly (no lane leaves int32).
// The one-row kernel moves w's sign onto a instead, one more op per pair.
// The scales arrive as f32 (QuantTile::fn_scaled: converted once per cache
// tile and per call by matmul_quant_tiled), and a block pair's
// [s_b x 8 | s_b+1 x 8] is two broadcast loads and a blend; the one-row
// kernel converts each scalar, broadcasts and blends per block pair and row,
// which made the old tile's per-block-pair work about as large as its 12
// pairs' dots (device Xeon: 61-69 Gop/s flat, now 125-187).
#if SS_QUANT_AVX512                           // x86 builds only (CMakeLists.txt)
#if defined(__GNUC__) && !defined(__clang__)  // GCC bug 105593, as quant_kernels_avx512.cpp
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_blocks.h"

namespace specstack::cpu::quant_avx512vnni {
namespace {

using namespace quant;

constexpr int kTileW = 4;  // weight rows
constexpr int kTileC = 3;  // activation rows

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// A 32-block's values as signed bytes, as quant_kernels_avx512.cpp.
inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i b = _mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x0F));
}
inline __m256i bits_32(const uint8_t* p) {  // byte j = 0xFF where bit j is set
  uint32_t x;
  std::memcpy(&x, p, 4);
  return _mm256_movm_epi8(static_cast<__mmask32>(x));
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

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

inline __m256i dot_i8_256(__m256i x, __m256i y) {
  const __mmask32 neg = _mm256_movepi8_mask(x);
  const __m256i signed_y = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x), signed_y);
}

// [s[0] x 8 | s[stride] x 8]: the one-row kernel's mask_blend of two broadcasts.
inline __m512 halves_at(const float* s, int64_t stride) {
  return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(s[0]), _mm512_set1_ps(s[stride]));
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
  __m512 acc[kTileW][kTileC];
  for (int r = 0; r < kTileW; ++r)
    for (int c = 0; c < kTileC; ++c) acc[r][c] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m512i bias = _mm512_set1_epi8(char(0x80));  // a ^ 0x80 = a + 128; also 128 as u8
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    __m512i au[kTileC];
    __m512 dy[kTileC];
    for (int c = 0; c < kTileC; ++c) {
      au[c] = _mm512_xor_si512(join(load256(y[c][b].qs), load256(y[c][b + 1].qs)), bias);
      dy[c] = halves_at(as + c * as_stride + b, 1);
    }
    for (int r = 0; r < kTileW; ++r) {
      const __m512i xv = join(values(x[r][b]), values(x[r][b + 1]));
      // -128 Σ w_j per lane: 128 (unsigned) times w, negated.
      const __m512i start = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xv));
      const __m512 dx = halves_at(ws + b * ws_stride + r, ws_stride);
      for (int c = 0; c < kTileC; ++c) {
        const __m512i dot = _mm512_dpbusd_epi32(start, au[c], xv);
        // [f16(w.d) f16(a.d) of block b x 8 | of block b + 1 x 8]: the
        // one-row kernel's two scalar products, one vector multiply here.
        const __m512 d = _mm512_mul_ps(dx, dy[c]);
        acc[r][c] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(dot), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < kTileW; ++r) {
    for (int c = 0; c < kTileC; ++c) {
      __m256 lo = _mm512_castps512_ps256(acc[r][c]);
      const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][c]), 1));
      if (b < n_blocks) {  // the odd last block, as the one-row kernel
        const __m256 d = _mm256_set1_ps(ws[b * ws_stride + r] * as[c * as_stride + b]);
        lo = _mm256_fmadd_ps(
            d, _mm256_cvtepi32_ps(dot_i8_256(values(x[r][b]), load256(y[c][b].qs))), lo);
      }
      out[c * out_stride + r] = hsum(_mm256_add_ps(lo, hi));
    }
  }
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
// with AVX-512 in this file).
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

}  // namespace specstack::cpu::quant_avx512vnni
#endif  // SS_QUANT_AVX512

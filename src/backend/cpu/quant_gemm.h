// The int8 GEMM for prefill on block-quantized weights: llama.cpp's scheme
// (llamafile's tinyBLAS, which llama.cpp runs for prompt processing on
// Q8_0): the activation rows are quantized to int8 blocks once per call, as
// for decode (quant_matmul.h), then register tiles of W weight rows x C
// activation rows run over the blocks, loading each weight block once for C
// activation rows and each activation block once for W weight rows. Every
// output equals the one-row kernel's (QuantKernel::dot) for its (weight row,
// activation row) bit for bit, so prefill and decode compute the same floats;
// the precision is that of the decode path (int8 activations), not that of
// dequantize + sgemm (f32 activations).
//
// Tiles exist for the 32-blocks (Q8_0, Q4_0, Q5_0) on AVX2 and AVX-VNNI (4 x
// 2, one source: quant_tile_avx2.cpp) and AVX-512 VNNI (5 x 3, on operands packed once per call);
// the K-quants and the scalar isa have none (quant_tile(...).fn == nullptr) and prefill dequantizes
// tiles of weight rows for sgemm (cpu_matmul.h).
#pragma once

#include <cstdint>
#include <string>

#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

struct QuantTile {
  int rows = 0;  // weight rows per tile (W)
  int cols = 0;  // activation rows per tile (C)
  // out[c * out_stride + r] = dot(w + r * w_stride, a + c * a_stride,
  // n_blocks) for r < rows, c < cols, bit for bit. Self-contained: converts
  // the tile's f16 block scales itself, on every call.
  void (*fn)(const void* w, int64_t w_stride, const void* a, int64_t a_stride, int64_t n_blocks,
             float* out, int64_t out_stride) = nullptr;
  // The same outputs with the blocks' scales converted beforehand (by
  // `scales`): ws[b * ws_stride + r] is block b's scale of weight row r
  // (block-major: the tile's rows side by side), as[c * as_stride + b] that
  // of activation row c (row-major: block-major, a 512-row chunk's blocks
  // would be 2 KB apart). matmul_quant_tiled converts a cache tile's weight scales
  // once for all activation rows and the activations' once per call; per
  // tile that work was 2/3 (AVX2) to all (AVX-512) of the dots' instructions.
  void (*fn_scaled)(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride,
                    const void* a, int64_t a_stride, const float* as, int64_t as_stride,
                    int64_t n_blocks, float* out, int64_t out_stride) = nullptr;
  // out[r * out_row_stride + b * out_block_stride] = the f16 scale of block
  // b of row r as f32, for n_rows rows row_stride bytes apart, blocks
  // block_bytes apart (weight rows of the tile's type or Q8_0 activation
  // rows: each of their blocks starts with it).
  void (*scales)(const void* rows, int64_t row_stride, int64_t n_rows, int64_t block_bytes,
                 int64_t n_blocks, float* out, int64_t out_row_stride,
                 int64_t out_block_stride) = nullptr;

  // The packed form (AVX-512 VNNI; fn_scaled and scales are null there, and
  // these null on AVX2): operands rearranged once per call so that the
  // tile's inner loop is only the one-row kernel's four ops per (pair,
  // block pair) (quant_tile_avx512.cpp says how, and why it stays bit-equal).
  // A packed row of n_blocks blocks holds n_pairs = ceil(n_blocks / 2) block
  // pairs of w_pair_bytes (weights) / a_pair_bytes (Q8_0 activations) bytes
  // and 2 n_pairs f32 scales; rows are consecutive in both arrays.
  int64_t w_pair_bytes = 0;
  int64_t a_pair_bytes = 0;
  void (*pack_w)(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* out_scales) = nullptr;
  void (*pack_a)(const void* a, int64_t a_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* out_scales) = nullptr;
  // out[c * out_stride + r] = dot(weight row r, activation row c) bit for
  // bit, for r < n_rows <= rows and c < n_cols <= cols packed rows (ragged
  // edges too), n_pairs block pairs.
  void (*fn_packed)(const uint8_t* pw, const float* pw_scales, const uint8_t* pa,
                    const float* pa_scales, int64_t n_pairs, int n_rows, int n_cols, float* out,
                    int64_t out_stride) = nullptr;
};

// The tile for weights of `dtype` on `isa`; fn null where there is none.
QuantTile quant_tile(DType dtype, Isa isa);

// y = x · wᵀ (+ bias) through quant_tile's tiles, the ragged edges (weight
// rows mod W, activation rows mod C) through the one- and four-row kernels:
// bit for bit what matmul_quant gives. x [n, in] f32, w [out, in] quantized
// with a tile on `isa` (checked), bias [out] f32 or null, y [n, out] f32.
void matmul_quant_tiled(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& y, Isa isa);

// Prefill (more x rows than matmul_quant_max_rows) on quantized weights.
// kAuto: the block-sum GEMM where it exists (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K
// on AVX-512 VNNI or AVX-VNNI, quant_blocksum.h; Q4_0 / Q5_0 run the Q8_0 kernel on
// their unpacked blocks, not measured separately: Q8_0 1.1x the packed tiles at 17 rows, 1.5-2.1x
// from 32 to 512, one core of the VNNI dev VM, docs/benchmarks.md session
// 26; Q4_K 1.2x dequantize + sgemm at 512 rows on the device Xeon, session
// 27, and at least the tiles' speed from 32 rows on the dev VM), else
// the int8 tiles by row count (quant_tiled_max_rows), else dequantize +
// sgemm. Pinned: kInt8 the int8 tiles (bit-equal to the decode kernels),
// kBlockSum the block-sum GEMM (kAuto's choice for the types it lacks),
// kSgemm dequantize + sgemm.
enum class QuantPrefill : uint8_t { kAuto, kInt8, kSgemm, kBlockSum };

// Up to this many x rows the int8 tiles, beyond that dequantize + sgemm,
// for the tiles of `isa` under kAuto (tiles / sgemm speed, 2 threads):
// AVX-512 VNNI 256 (docs/benchmarks.md "session 25: int8 tiles at prompt
// length", device Xeon, packed 5 x 3 tiles, Q8_0 / Q4_0 8192 x 2048: 2.2 /
// 2.6x at 17 rows, 1.3-1.8x at 64, 1.06-1.74x at 128, 1.00-1.51x at 256,
// 0.83-1.13x at 512, so 512-row chunks are a draw and stay on sgemm); AVX2
// 32 (docs/benchmarks.md "session 24: int8 tiles, faster", EPYC dev VM, 1
// thread: 1.22x at 32, 0.98-1.02x at 48, 0.85x at 64, Q5_0 0.95x at 32;
// the Xeon's AVX2 1.00x at 32). Without VNNI an int8 block dot costs
// maddubs + madd, two integer multiplies per 16 products, against one f32
// FMA per 8 in sgemm.
int64_t quant_tiled_max_rows(Isa isa);

// The environment variable that pins the prefill path for A/B runs:
// "int8", "blocksum" or "sgemm" (unset: kAuto).
inline constexpr const char* kQuantPrefillEnv = "SPECSTACK_QUANT_PREFILL";

// The path for SPECSTACK_QUANT_PREFILL's value `pinned` (null or empty:
// unset, kAuto); anything else gives kAuto with a one-line *note (*note
// empty otherwise).
QuantPrefill choose_quant_prefill(const char* pinned, std::string* note);

// choose_quant_prefill(getenv(SPECSTACK_QUANT_PREFILL)), once per process;
// a note goes to stderr.
QuantPrefill quant_prefill_path();

// Whether matmul() runs x [n_rows, ...] · wᵀ for a weight of `dtype` through
// the block-sum GEMM / the int8 tiles on `isa` under `path` (n_rows above
// matmul_quant_max_rows); at most one of the two, neither: dequantize + sgemm.
bool quant_prefill_uses_blocksum(QuantPrefill path, DType dtype, Isa isa, int64_t n_rows);
bool quant_prefill_uses_tiles(QuantPrefill path, DType dtype, Isa isa, int64_t n_rows);

}  // namespace specstack::cpu

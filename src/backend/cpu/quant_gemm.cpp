#include "backend/cpu/quant_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/quant_blocksum.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"

namespace specstack::cpu {

// The tile kernels each isa's TU defines (quant_tile_avx2.cpp,
// quant_tile_avx512.cpp): the self-contained tiles in both, written once.
#define SS_DECLARE_TILE_KERNELS                                                    \
  int tile_32_rows();                                                              \
  int tile_32_cols();                                                              \
  void tile_q8_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, \
                 int64_t n_blocks, float* out, int64_t out_stride);                \
  void tile_q4_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, \
                 int64_t n_blocks, float* out, int64_t out_stride);                \
  void tile_q5_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride, \
                 int64_t n_blocks, float* out, int64_t out_stride);
#if SS_QUANT_AVX2
// quant_tile_avx2.cpp, built twice: AVX2 and AVX-VNNI (quant_simd_avx2.h).
#define SS_DECLARE_AVX2_TILES                                                                \
  SS_DECLARE_TILE_KERNELS                                                                    \
  void tile_scaled_q8_0(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride, \
                        const void* a, int64_t a_stride, const float* as, int64_t as_stride, \
                        int64_t n_blocks, float* out, int64_t out_stride);                   \
  void tile_scaled_q4_0(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride, \
                        const void* a, int64_t a_stride, const float* as, int64_t as_stride, \
                        int64_t n_blocks, float* out, int64_t out_stride);                   \
  void tile_scaled_q5_0(const void* w, int64_t w_stride, const float* ws, int64_t ws_stride, \
                        const void* a, int64_t a_stride, const float* as, int64_t as_stride, \
                        int64_t n_blocks, float* out, int64_t out_stride);                   \
  void scales_32(const void* rows, int64_t row_stride, int64_t n_rows, int64_t block_bytes,  \
                 int64_t n_blocks, float* out, int64_t out_row_stride, int64_t out_block_stride);
namespace quant_avx2 {
SS_DECLARE_AVX2_TILES
}  // namespace quant_avx2
namespace quant_avxvnni {
SS_DECLARE_AVX2_TILES
}  // namespace quant_avxvnni
#undef SS_DECLARE_AVX2_TILES
#endif
#if SS_QUANT_AVX512
namespace quant_avx512vnni {
SS_DECLARE_TILE_KERNELS
int64_t packed_w_pair_bytes();
int64_t packed_a_pair_bytes();
void pack_w_q8_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales);
void pack_w_q4_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales);
void pack_w_q5_0(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                 float* scales);
void pack_act_q8_0(const void* a, int64_t a_stride, int64_t n_rows, int64_t n_blocks, uint8_t* out,
                   float* scales);
void tile_packed_32(const uint8_t* pw, const float* pws, const uint8_t* pa, const float* pas,
                    int64_t n_pairs, int rows, int cols, float* out, int64_t out_stride);
}  // namespace quant_avx512vnni
#endif
#undef SS_DECLARE_TILE_KERNELS

namespace {

// Weight rows per cache tile: all n activation rows pass over these while
// they stay in L1/L2 (32 rows of a 2048-wide Q8_0 matrix are 70 KB), and
// each register tile streams W of them against C activation rows.
constexpr int64_t kTileRows = 32;

// Fewer multiply-adds than this per share cost more in fork-join overhead
// than they gain (as matmul_quant).
constexpr int64_t kMinMacsPerShare = 32768;

// Register tiles per cache tile of the packed path: 8 x 5 = 40 weight rows
// (80 KB packed at 2048 wide, 320 KB at 8192: L2), a whole number of tiles
// so that only a share's last rows are ragged.
constexpr int64_t kPackedCacheTiles = 8;

// Packed activation bytes per chunk of activation rows: every cache tile of
// a share's weights passes over one chunk, which stays in L2 (2 MB a core on
// the device Xeon; 512 packed rows of 2048 would fill it, of 8192 take 8 MB),
// and the weights are packed again per chunk (~2-4% of the tiles' work at
// 256 / 64 rows a chunk).
constexpr int64_t kActChunkBytes = int64_t{1} << 20;

// 64-byte aligned scratch (the packed pairs are one zmm each).
struct Scratch {
  explicit Scratch(int64_t bytes) : raw(new uint8_t[size_t(bytes + 64)]) {}
  uint8_t* get() const {
    return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw.get()) + 63) &
                                      ~uintptr_t{63});
  }
  std::unique_ptr<uint8_t[]> raw;
};

// matmul_quant_tiled on a packed tile (QuantTile::fn_packed): the
// activations packed once per call (n x n_pairs a_pair_bytes, 8 MB for 512
// rows of 8192), each share's weights one cache tile at a time into a
// scratch of the share's thread (no second copy of the weights is kept:
// decode reads the file's blocks, and packing costs ~1/n of the tile's work).
// Every (weight row, activation row) goes through the packed tiles, the
// ragged edges through their smaller instantiations.
void matmul_packed(ThreadPool& pool, const QuantTile& tile, const uint8_t* act,
                   int64_t act_row_bytes, int64_t n, const uint8_t* w_data, int64_t w_row_bytes,
                   int64_t out, int64_t n_blocks, const float* b, float* y_data) {
  const int64_t n_pairs = (n_blocks + 1) / 2;
  const int64_t pa_row = n_pairs * tile.a_pair_bytes, pw_row = n_pairs * tile.w_pair_bytes;
  const Scratch pa(n * pa_row);
  const std::unique_ptr<float[]> pa_scale(new float[size_t(n * 2 * n_pairs)]);
  pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    tile.pack_a(act + begin * act_row_bytes, act_row_bytes, end - begin, n_blocks,
                pa.get() + begin * pa_row, pa_scale.get() + begin * 2 * n_pairs);
  });
  const int64_t W = tile.rows, C = tile.cols, cache_rows = W * kPackedCacheTiles;
  const int64_t grain = std::max<int64_t>(
      W, (kMinMacsPerShare / std::max<int64_t>(1, n_blocks * 32 * n) + W - 1) / W * W);
  const int64_t chunk_rows = std::max<int64_t>(C, kActChunkBytes / pa_row / C * C);
  pool.parallel_for(out, grain, [&](int64_t begin, int64_t end) {
    const Scratch pw(cache_rows * pw_row);
    const std::unique_ptr<float[]> pw_scale(new float[size_t(cache_rows * 2 * n_pairs)]);
    for (int64_t i0 = 0; i0 < n; i0 += chunk_rows) {
      const int64_t i1 = std::min(i0 + chunk_rows, n);
      for (int64_t o0 = begin; o0 < end; o0 += cache_rows) {
        const int64_t o1 = std::min(o0 + cache_rows, end);
        tile.pack_w(w_data + o0 * w_row_bytes, w_row_bytes, o1 - o0, n_blocks, pw.get(),
                    pw_scale.get());
        for (int64_t i = i0; i < i1; i += C) {
          const int cols = int(std::min(C, i1 - i));
          for (int64_t o = o0; o < o1; o += W) {
            tile.fn_packed(pw.get() + (o - o0) * pw_row, pw_scale.get() + (o - o0) * 2 * n_pairs,
                           pa.get() + i * pa_row, pa_scale.get() + i * 2 * n_pairs, n_pairs,
                           int(std::min(W, o1 - o)), cols, y_data + i * out + o, out);
          }
        }
      }
    }
    if (b != nullptr) {
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = begin; o < end; ++o) y_data[r * out + o] += b[o];
    }
  });
}

}  // namespace

QuantTile quant_tile(DType dtype, Isa isa) {
  SS_CHECK_MSG(quant_isa_available(isa),
               std::string("quantized tiles: isa not available here: ") + isa_name(isa));
  QuantTile t;
  auto pick = [&](auto q8_0, auto q4_0, auto q5_0) {
    if (dtype == DType::kQ8_0) return q8_0;
    if (dtype == DType::kQ4_0) return q4_0;
    return dtype == DType::kQ5_0 ? q5_0 : decltype(q8_0){};
  };
#if SS_QUANT_AVX512
  if (isa == Isa::kAvx512Vnni) {
    namespace v = quant_avx512vnni;
    t.rows = v::tile_32_rows(), t.cols = v::tile_32_cols();
    t.fn = pick(v::tile_q8_0, v::tile_q4_0, v::tile_q5_0);
    t.w_pair_bytes = v::packed_w_pair_bytes(), t.a_pair_bytes = v::packed_a_pair_bytes();
    t.pack_w = pick(v::pack_w_q8_0, v::pack_w_q4_0, v::pack_w_q5_0);
    t.pack_a = v::pack_act_q8_0;
    t.fn_packed = v::tile_packed_32;
  }
#endif
#if SS_QUANT_AVX2
  // quant_tile_avx2.cpp's two builds: the same entry points in two namespaces.
#define SS_AVX2_FAMILY(v)                                                            \
  t.rows = v::tile_32_rows(), t.cols = v::tile_32_cols();                            \
  t.fn = pick(v::tile_q8_0, v::tile_q4_0, v::tile_q5_0);                             \
  t.fn_scaled = pick(v::tile_scaled_q8_0, v::tile_scaled_q4_0, v::tile_scaled_q5_0); \
  t.scales = v::scales_32
  if (isa == Isa::kAvx2) {
    SS_AVX2_FAMILY(quant_avx2);
  } else if (isa == Isa::kAvxVnni) {
    SS_AVX2_FAMILY(quant_avxvnni);
  }
#undef SS_AVX2_FAMILY
#endif
  if (t.fn == nullptr) t = QuantTile{};
  return t;
}

void matmul_quant_tiled(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& y, Isa isa) {
  check_quant_matmul_args(x, w, bias, y);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  const QuantTile tile = quant_tile(w.dtype(), isa);
  SS_CHECK_MSG(tile.fn != nullptr, std::string("matmul_quant_tiled: no int8 tile for ") +
                                       dtype_name(w.dtype()) + " on " + isa_name(isa));
  if (n == 0 || out == 0) return;
  const QuantKernel k = quant_kernel(w.dtype(), isa);
  SS_CHECK_EQ(in % k.act_block_elements, 0);  // rows are whole weight blocks
  const int64_t n_blocks = in / k.act_block_elements;
  const int64_t act_row_bytes = n_blocks * int64_t(k.act_block_bytes);
  const int64_t w_row_bytes = int64_t(dtype_bytes(w.dtype(), in));
  const std::unique_ptr<uint8_t[]> act = quantize_activation_rows(pool, k, x);
  const auto* w_data = static_cast<const uint8_t*>(w.raw());
  const float* b = bias ? bias->f32() : nullptr;
  float* y_data = y.f32();
  if (tile.fn_packed != nullptr) {
    matmul_packed(pool, tile, act.get(), act_row_bytes, n, w_data, w_row_bytes, out, n_blocks, b,
                  y_data);
    return;
  }
  // act [n, n_blocks] activation blocks, quantized once for every output
  // (above); a_scale [n, n_blocks] their scales as f32 (QuantTile::fn_scaled).
  const std::unique_ptr<float[]> a_scale(new float[size_t(n_blocks * n)]);
  pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    tile.scales(act.get() + begin * act_row_bytes, act_row_bytes, end - begin, k.act_block_bytes,
                n_blocks, a_scale.get() + begin * n_blocks, n_blocks, 1);
  });

  const int64_t w_block_bytes = int64_t(dtype_block_bytes(w.dtype()));
  const int64_t W = tile.rows, C = tile.cols;
  const int64_t grain =
      std::max<int64_t>(W, (kMinMacsPerShare / std::max<int64_t>(1, in * n) + W - 1) / W * W);
  pool.parallel_for(out, grain, [&](int64_t begin, int64_t end) {
    // w_scale [n_blocks, kTileRows]: the cache tile's weight scales, block-major,
    // converted once for all n activation rows.
    const std::unique_ptr<float[]> w_scale(new float[size_t(n_blocks * kTileRows)]);
    for (int64_t o0 = begin; o0 < end; o0 += kTileRows) {
      const int64_t o1 = std::min(o0 + kTileRows, end);
      const int64_t o_tiled = o0 + (o1 - o0) / W * W;  // [o0, o_tiled) in whole tiles
      tile.scales(w_data + o0 * w_row_bytes, w_row_bytes, o_tiled - o0, w_block_bytes, n_blocks,
                  w_scale.get(), 1, kTileRows);
      int64_t i = 0;
      for (; i + C <= n; i += C) {
        const uint8_t* a = act.get() + i * act_row_bytes;
        for (int64_t o = o0; o < o_tiled; o += W) {
          tile.fn_scaled(w_data + o * w_row_bytes, w_row_bytes, w_scale.get() + (o - o0), kTileRows,
                         a, act_row_bytes, a_scale.get() + i * n_blocks, n_blocks, n_blocks,
                         y_data + i * out + o, out);
        }
        for (int64_t o = o_tiled; o < o1; ++o) {  // the weight rows left over
          for (int64_t c = 0; c < C; ++c)
            y_data[(i + c) * out + o] =
                k.dot(w_data + o * w_row_bytes, a + c * act_row_bytes, n_blocks);
        }
      }
      for (; i < n; ++i) {  // the activation rows left over, four weight rows a pass
        const uint8_t* a = act.get() + i * act_row_bytes;
        float* y_row = y_data + i * out;
        int64_t o = o0;
        for (; o + 4 <= o1; o += 4)
          k.dot4(w_data + o * w_row_bytes, w_row_bytes, a, n_blocks, y_row + o);
        for (; o < o1; ++o) y_row[o] = k.dot(w_data + o * w_row_bytes, a, n_blocks);
      }
      if (b != nullptr) {
        for (int64_t r = 0; r < n; ++r)
          for (int64_t o = o0; o < o1; ++o) y_data[r * out + o] += b[o];
      }
    }
  });
}

int64_t quant_tiled_max_rows(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Vnni:
      return 256;
    case Isa::kAvx2:
    case Isa::kAvxVnni:
      return 32;
    default:
      return 0;
  }
}

QuantPrefill choose_quant_prefill(const char* pinned, std::string* note) {
  note->clear();
  if (pinned == nullptr || *pinned == '\0') return QuantPrefill::kAuto;
  if (std::strcmp(pinned, "int8") == 0) return QuantPrefill::kInt8;
  if (std::strcmp(pinned, "sgemm") == 0) return QuantPrefill::kSgemm;
  if (std::strcmp(pinned, "blocksum") == 0) return QuantPrefill::kBlockSum;
  *note = std::string(kQuantPrefillEnv) + "=" + pinned +
          " ignored: expected int8, blocksum or sgemm; choosing by row count";
  return QuantPrefill::kAuto;
}

bool quant_prefill_uses_blocksum(QuantPrefill path, DType dtype, Isa isa, int64_t n_rows) {
  (void)n_rows;  // faster than the tiles from 17 rows on (quant_gemm.h)
  return (path == QuantPrefill::kAuto || path == QuantPrefill::kBlockSum) &&
         quant_blocksum_available(dtype, isa);
}

bool quant_prefill_uses_tiles(QuantPrefill path, DType dtype, Isa isa, int64_t n_rows) {
  if (path == QuantPrefill::kSgemm || quant_tile(dtype, isa).fn == nullptr) return false;
  if (quant_prefill_uses_blocksum(path, dtype, isa, n_rows)) return false;
  return path == QuantPrefill::kInt8 || n_rows <= quant_tiled_max_rows(isa);
}

QuantPrefill quant_prefill_path() {
  static const QuantPrefill path = [] {
    std::string note;
    const QuantPrefill p = choose_quant_prefill(std::getenv(kQuantPrefillEnv), &note);
    if (!note.empty()) std::fprintf(stderr, "specstack: %s\n", note.c_str());
    return p;
  }();
  return path;
}

}  // namespace specstack::cpu

#include "backend/cpu/quant_gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"

namespace specstack::cpu {

// The tile kernels each isa's TU defines (quant_tile_avx2.cpp,
// quant_tile_avx512.cpp), declared once for both namespaces.
#define SS_DECLARE_TILE_KERNELS                                                              \
  int tile_32_rows();                                                                        \
  int tile_32_cols();                                                                        \
  void tile_q8_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride,           \
                 int64_t n_blocks, float* out, int64_t out_stride);                          \
  void tile_q4_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride,           \
                 int64_t n_blocks, float* out, int64_t out_stride);                          \
  void tile_q5_0(const void* w, int64_t w_stride, const void* a, int64_t a_stride,           \
                 int64_t n_blocks, float* out, int64_t out_stride);                          \
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
#if SS_QUANT_AVX2
namespace quant_avx2 {
SS_DECLARE_TILE_KERNELS
}  // namespace quant_avx2
#endif
#if SS_QUANT_AVX512
namespace quant_avx512vnni {
SS_DECLARE_TILE_KERNELS
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

}  // namespace

QuantTile quant_tile(DType dtype, Isa isa) {
  SS_CHECK_MSG(quant_isa_available(isa),
               std::string("quantized tiles: isa not available here: ") + isa_name(isa));
  QuantTile t;
  using TileFn = decltype(t.fn);
  using ScaledFn = decltype(t.fn_scaled);
  // The 32-blocks: one tile body per isa, its values decoded as the one-row kernel's.
  auto pick = [&](TileFn q8_0, TileFn q4_0, TileFn q5_0, ScaledFn s8_0, ScaledFn s4_0,
                  ScaledFn s5_0) {
    if (dtype == DType::kQ8_0) t.fn = q8_0, t.fn_scaled = s8_0;
    if (dtype == DType::kQ4_0) t.fn = q4_0, t.fn_scaled = s4_0;
    if (dtype == DType::kQ5_0) t.fn = q5_0, t.fn_scaled = s5_0;
  };
#if SS_QUANT_AVX512
  if (isa == Isa::kAvx512Vnni) {
    t.rows = quant_avx512vnni::tile_32_rows(), t.cols = quant_avx512vnni::tile_32_cols();
    pick(quant_avx512vnni::tile_q8_0, quant_avx512vnni::tile_q4_0, quant_avx512vnni::tile_q5_0,
         quant_avx512vnni::tile_scaled_q8_0, quant_avx512vnni::tile_scaled_q4_0,
         quant_avx512vnni::tile_scaled_q5_0);
    t.scales = quant_avx512vnni::scales_32;
  }
#endif
#if SS_QUANT_AVX2
  if (isa == Isa::kAvx2) {
    t.rows = quant_avx2::tile_32_rows(), t.cols = quant_avx2::tile_32_cols();
    pick(quant_avx2::tile_q8_0, quant_avx2::tile_q4_0, quant_avx2::tile_q5_0,
         quant_avx2::tile_scaled_q8_0, quant_avx2::tile_scaled_q4_0, quant_avx2::tile_scaled_q5_0);
    t.scales = quant_avx2::scales_32;
  }
#endif
  if (t.fn == nullptr) t = QuantTile{};
  return t;
}

void matmul_quant_tiled(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& y, Isa isa) {
  SS_CHECK(x.device() == Device::kCpu && w.device() == Device::kCpu && y.device() == Device::kCpu);
  SS_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  SS_CHECK_EQ(w.size(1), in);
  SS_CHECK(y.size(0) == n && y.size(1) == out);
  if (bias != nullptr) SS_CHECK_EQ(bias->numel(), out);
  const QuantTile tile = quant_tile(w.dtype(), isa);
  SS_CHECK_MSG(tile.fn != nullptr, std::string("matmul_quant_tiled: no int8 tile for ") +
                                       dtype_name(w.dtype()) + " on " + isa_name(isa));
  if (n == 0 || out == 0) return;
  const QuantKernel k = quant_kernel(w.dtype(), isa);
  SS_CHECK_EQ(in % k.act_block_elements, 0);  // rows are whole weight blocks
  const int64_t n_blocks = in / k.act_block_elements;
  const int64_t act_row_bytes = n_blocks * int64_t(k.act_block_bytes);
  const int64_t w_row_bytes = int64_t(dtype_bytes(w.dtype(), in));
  // act [n, n_blocks] activation blocks, quantized once for every output;
  // a_scale [n, n_blocks] their scales as f32 (QuantTile::fn_scaled).
  const std::unique_ptr<uint8_t[]> act = quantize_activation_rows(pool, k, x);
  const std::unique_ptr<float[]> a_scale(new float[size_t(n_blocks * n)]);
  pool.parallel_for(n, 16, [&](int64_t begin, int64_t end) {
    tile.scales(act.get() + begin * act_row_bytes, act_row_bytes, end - begin, k.act_block_bytes,
                n_blocks, a_scale.get() + begin * n_blocks, n_blocks, 1);
  });

  const auto* w_data = static_cast<const uint8_t*>(w.raw());
  const int64_t w_block_bytes = int64_t(dtype_block_bytes(w.dtype()));
  const float* b = bias ? bias->f32() : nullptr;
  float* y_data = y.f32();
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
      return 64;
    case Isa::kAvx2:
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
  *note = std::string(kQuantPrefillEnv) + "=" + pinned +
          " ignored: expected int8 or sgemm; choosing by row count";
  return QuantPrefill::kAuto;
}

bool quant_prefill_uses_tiles(QuantPrefill path, DType dtype, Isa isa, int64_t n_rows) {
  if (path == QuantPrefill::kSgemm || quant_tile(dtype, isa).fn == nullptr) return false;
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

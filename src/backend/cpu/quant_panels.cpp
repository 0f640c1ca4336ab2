#include "backend/cpu/quant_panels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"

namespace specstack::cpu {

#if SS_QUANT_AVX2
// quant_panels_avx512.cpp and quant_panels_avxvnni.cpp: na (1..4)
// activation rows against one panel over n_blocks blocks; y[j * y_stride +
// r] = row r's sum for activation row j, carried on from y's values when
// `accumulate` (the FMA chain of a pass over all blocks, cut into chunks).
// panel_rows_wide: one activation row against n_panels (1, 2 or 4)
// consecutive panels side by side; y [16 * n_panels].
#define SS_DECLARE_PANEL_KERNELS                                                                \
  void panel_rows(const uint8_t* panel, int64_t n_blocks, const int8_t* aq, int64_t aq_stride,  \
                  const float* ad, const int32_t* ac, int64_t as_stride, int na, float* y,      \
                  int64_t y_stride, bool accumulate);                                           \
  void panel_rows_wide(const uint8_t* panels, int n_panels, int64_t n_blocks, const int8_t* aq, \
                       const float* ad, const int32_t* ac, float* y);
namespace quant_avxvnni {
SS_DECLARE_PANEL_KERNELS
}  // namespace quant_avxvnni
#if SS_QUANT_AVX512
namespace quant_avx512vnni {
SS_DECLARE_PANEL_KERNELS
}  // namespace quant_avx512vnni
#endif
#undef SS_DECLARE_PANEL_KERNELS
#endif

namespace {

using quant::BlockQ8_0;

constexpr int kMaxActRows = 4;  // activation rows per pass over a panel
// Panels read side by side for one activation row: two streams a core
// (1, 2 and 4 measured within noise of each other, 2 ahead by a little).
constexpr int kWidePanels = 2;
// Blocks per chunk of a panel when several passes of activation rows meet
// it: 32 blocks are 17 KB of panel, which stay in L1 across the passes.
constexpr int64_t kChunkBlocks = 32;

// Fewer multiply-adds than this per share cost more in fork-join overhead
// than they gain (as matmul_quant).
constexpr int64_t kMinMacsPerShare = 32768;

// The activation rows as the panel kernels read them: q [n][n_blocks * 32]
// int8 (rows 64-byte aligned), d [n][n_blocks] f32 scales, corr [n][n_blocks]
// -128 Σq per block.
struct PanelActs {
  int64_t q_stride = 0;
  std::unique_ptr<uint8_t[]> q_storage;
  int8_t* q = nullptr;
  std::unique_ptr<float[]> d;
  std::unique_ptr<int32_t[]> corr;
};

PanelActs prepare_acts(const uint8_t* blocks, int64_t n, int64_t n_blocks) {
  PanelActs a;
  a.q_stride = (n_blocks * 32 + 63) / 64 * 64;
  a.q_storage.reset(new uint8_t[size_t(n * a.q_stride + 64)]);
  a.q = reinterpret_cast<int8_t*>((reinterpret_cast<uintptr_t>(a.q_storage.get()) + 63) &
                                  ~uintptr_t{63});
  a.d.reset(new float[size_t(n * n_blocks)]);
  a.corr.reset(new int32_t[size_t(n * n_blocks)]);
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(blocks);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      const BlockQ8_0& x = blk[i * n_blocks + b];
      std::memcpy(a.q + i * a.q_stride + 32 * b, x.qs, 32);
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += x.qs[j];
      a.d[size_t(i * n_blocks + b)] = f16_to_f32(x.d);
      a.corr[size_t(i * n_blocks + b)] = -128 * sum;
    }
  }
  return a;
}

// The scalar reference of panel_rows: blocksum_dot_ref's loop on the panel
// bytes (q = byte - 128).
void panel_rows_scalar(const uint8_t* panel, int64_t n_blocks, const PanelActs& a, int64_t act_row,
                       int na, float* y, int64_t y_stride) {
  for (int j = 0; j < na; ++j) {
    const int8_t* q = a.q + (act_row + j) * a.q_stride;
    const float* d = a.d.get() + (act_row + j) * n_blocks;
    for (int r = 0; r < kPanelRows; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* blk = panel + b * kPanelBlockBytes;
        uint16_t dw;
        std::memcpy(&dw, blk + 2 * r, 2);
        int32_t sum = 0;
        for (int k = 0; k < 8; ++k) {
          for (int e = 0; e < 4; ++e) {
            sum += (int32_t{blk[32 + 64 * k + 4 * r + e]} - 128) * int32_t{q[32 * b + 4 * k + e]};
          }
        }
        acc = std::fma(f16_to_f32(dw) * d[b], float(sum), acc);
      }
      y[j * y_stride + r] = acc;
    }
  }
}

}  // namespace

bool quant_panels_available(Isa isa) {
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
  return (isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni) && quant_isa_available(isa);
#else
  (void)isa;
  return false;
#endif
}

bool quant_panels_enabled() {
  static const bool enabled = [] {
    const char* pinned = std::getenv(kQuantPanelsEnv);
    const bool off = pinned != nullptr && std::strcmp(pinned, "0") == 0;
    return !off && quant_panels_available(quant_best_isa());
  }();
  return enabled;
}

bool q8_0_panels_fit(const Tensor& w) {
  return w.dtype() == DType::kQ8_0 && w.dim() == 2 && w.device() == Device::kCpu &&
         w.size(0) % kPanelRows == 0 && w.size(0) > 0 && w.size(1) % 32 == 0;
}

Tensor repack_q8_0_panels(ThreadPool& pool, const Tensor& w) {
  SS_CHECK_MSG(q8_0_panels_fit(w),
               std::string("repack_q8_0_panels: not a Q8_0 matrix of 16-row panels: ") +
                   dtype_name(w.dtype()));
  const int64_t out = w.size(0), n_blocks = w.size(1) / 32;
  Tensor packed = Tensor::zeros(DType::kQ8_0P, {out, w.size(1)});
  const auto* src = static_cast<const BlockQ8_0*>(w.raw());
  auto* dst = static_cast<uint8_t*>(packed.raw());
  pool.parallel_for(out / kPanelRows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      for (int64_t b = 0; b < n_blocks; ++b) {
        uint8_t* o = dst + (p * n_blocks + b) * kPanelBlockBytes;
        for (int64_t r = 0; r < kPanelRows; ++r) {
          const BlockQ8_0& blk = src[(p * kPanelRows + r) * n_blocks + b];
          std::memcpy(o + 2 * r, &blk.d, 2);
          for (int k = 0; k < 8; ++k) {
            uint32_t v;
            std::memcpy(&v, blk.qs + 4 * k, 4);
            v ^= 0x80808080u;  // q + 128 per byte
            std::memcpy(o + 32 + 64 * k + 4 * r, &v, 4);
          }
        }
      }
    }
  });
  return packed;
}

void panel_rows_to_q8_0(const Tensor& w, int64_t row_begin, int64_t row_end, void* out) {
  SS_CHECK(w.dtype() == DType::kQ8_0P && w.dim() == 2);
  SS_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.size(0));
  const int64_t n_blocks = w.size(1) / 32;
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<BlockQ8_0*>(out);
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t p = row / kPanelRows, r = row % kPanelRows;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const uint8_t* blk = src + (p * n_blocks + b) * kPanelBlockBytes;
      BlockQ8_0& o = dst[(row - row_begin) * n_blocks + b];
      std::memcpy(&o.d, blk + 2 * r, 2);
      for (int k = 0; k < 8; ++k) {
        uint32_t v;
        std::memcpy(&v, blk + 32 + 64 * k + 4 * r, 4);
        v ^= 0x80808080u;
        std::memcpy(o.qs + 4 * k, &v, 4);
      }
    }
  }
}

void matmul_q8_0_panels(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& y, Isa isa) {
  check_quant_matmul_args(x, w, bias, y);
  SS_CHECK_MSG(w.dtype() == DType::kQ8_0P,
               std::string("matmul_q8_0_panels weight dtype ") + dtype_name(w.dtype()));
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  SS_CHECK(out % kPanelRows == 0 && in % 32 == 0);
  if (n == 0 || out == 0) return;
  const int64_t n_blocks = in / 32;
  // The activation rows as every int8 path quantizes them (Q8_0 blocks).
  const QuantKernel k = quant_kernel(DType::kQ8_0, quant_isa_available(isa) ? isa : Isa::kScalar);
  const std::unique_ptr<uint8_t[]> blocks = quantize_activation_rows(pool, k, x);
  const PanelActs acts = prepare_acts(blocks.get(), n, n_blocks);
  const bool simd = quant_panels_available(isa);
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
  const auto rows_fn =
      isa == Isa::kAvx512Vnni ? quant_avx512vnni::panel_rows : quant_avxvnni::panel_rows;
  const auto wide_fn =
      isa == Isa::kAvx512Vnni ? quant_avx512vnni::panel_rows_wide : quant_avxvnni::panel_rows_wide;
#endif

  const auto* w_data = static_cast<const uint8_t*>(w.raw());
  const float* b = bias ? bias->f32() : nullptr;
  float* y_data = y.f32();
  const int64_t panel_bytes = n_blocks * kPanelBlockBytes;
  const int64_t grain =
      std::max<int64_t>(1, kMinMacsPerShare / std::max<int64_t>(1, in * n * kPanelRows));
  pool.parallel_for(out / kPanelRows, grain, [&](int64_t begin, int64_t end) {
    int64_t p = begin;
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
    // One activation row (decode): kWidePanels panels side by side.
    for (; simd && n == 1 && p + kWidePanels <= end; p += kWidePanels) {
      float* y_panels = y_data + p * kPanelRows;
      wide_fn(w_data + p * panel_bytes, kWidePanels, n_blocks, acts.q, acts.d.get(),
              acts.corr.get(), y_panels);
      for (int64_t r = 0; r < kPanelRows * kWidePanels; ++r)
        y_panels[r] += b ? b[p * kPanelRows + r] : 0.0f;
    }
#endif
    for (; p < end; ++p) {
      const uint8_t* panel = w_data + p * panel_bytes;
      float* y_panel = y_data + p * kPanelRows;
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
      // Chunks of kChunkBlocks blocks when more than one pass of activation
      // rows meets the panel, so its chunk is read from L1 by every pass.
      const int64_t chunk = n <= kMaxActRows ? n_blocks : kChunkBlocks;
      for (int64_t c0 = 0; simd && c0 < n_blocks; c0 += chunk) {
        const int64_t chunk_blocks = std::min(chunk, n_blocks - c0);
        for (int64_t i = 0; i < n; i += kMaxActRows) {
          const int na = int(std::min<int64_t>(kMaxActRows, n - i));
          const int64_t a = i * n_blocks + c0;
          rows_fn(panel + c0 * kPanelBlockBytes, chunk_blocks, acts.q + i * acts.q_stride + 32 * c0,
                  acts.q_stride, acts.d.get() + a, acts.corr.get() + a, n_blocks, na,
                  y_panel + i * out, out, c0 > 0);
        }
      }
#endif
      for (int64_t i = 0; !simd && i < n; i += kMaxActRows) {
        const int na = int(std::min<int64_t>(kMaxActRows, n - i));
        panel_rows_scalar(panel, n_blocks, acts, i, na, y_panel + i * out, out);
      }
      for (int64_t i = 0; i < n; ++i) {
        float* y_row = y_panel + i * out;
        for (int64_t r = 0; r < kPanelRows; ++r) y_row[r] += b ? b[p * kPanelRows + r] : 0.0f;
      }
    }
  });
}

}  // namespace specstack::cpu

#include "backend/cpu/quant_matmul.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_panels.h"
#include "gguf/gguf_dequant.h"
#include "gguf/gguf_types.h"

namespace specstack::cpu {
namespace {

// Weight rows per tile: every x row passes over a tile while it is in L1/L2
// (16 rows of a 4096-wide Q8_0 matrix are 70 KB), so prefill reads each x
// row from memory once per tile rather than once per output feature.
constexpr int64_t kTileRows = 16;

// Fewer multiply-adds than this per share cost more in fork-join overhead
// than they gain (the f32 matvec uses the same figure).
constexpr int64_t kMinMacsPerShare = 32768;

gguf::GgmlType ggml_type(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return gguf::GgmlType::kQ8_0;
    case DType::kQ4_0:
      return gguf::GgmlType::kQ4_0;
    case DType::kQ5_0:
      return gguf::GgmlType::kQ5_0;
    case DType::kQ4_K:
      return gguf::GgmlType::kQ4_K;
    case DType::kQ5_K:
      return gguf::GgmlType::kQ5_K;
    case DType::kQ6_K:
      return gguf::GgmlType::kQ6_K;
    default:
      SS_CHECK_MSG(false, std::string("not a quantized dtype: ") + dtype_name(dtype));
  }
  return gguf::GgmlType::kF32;
}

// Activation rows as a kernel reads them: the quantized blocks, or the
// kernel's prepared form of each (QuantPrepared), made here once for all
// weight rows. Rows of the prepared form start 64-byte aligned, so the
// kernels' 32- and 64-byte loads of them do not straddle cache lines.
struct KernelActs {
  const uint8_t* rows;
  int64_t row_bytes;
  std::unique_ptr<uint8_t[]> storage;
};

KernelActs prepare_rows(const QuantKernel& k, const uint8_t* act, int64_t act_row_bytes, int64_t n,
                        int64_t n_blocks) {
  constexpr int64_t kAlign = 64;
  KernelActs out{act, act_row_bytes, nullptr};
  if (k.prepared.prepare == nullptr) return out;
  out.row_bytes = (n_blocks * k.prepared.bytes_per_block + kAlign - 1) / kAlign * kAlign;
  out.storage.reset(new uint8_t[size_t(n * out.row_bytes + kAlign)]);
  const auto addr = reinterpret_cast<uintptr_t>(out.storage.get());
  auto* base = reinterpret_cast<uint8_t*>((addr + kAlign - 1) / kAlign * kAlign);
  for (int64_t i = 0; i < n; ++i) {
    k.prepared.prepare(act + i * act_row_bytes, n_blocks, base + i * out.row_bytes);
  }
  out.rows = base;
  return out;
}

}  // namespace

void dequantize_rows(const Tensor& w, int64_t row_begin, int64_t row_end, float* out) {
  SS_CHECK_EQ(w.dim(), 2);
  SS_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.size(0));
  const int64_t cols = w.size(1);
  if (w.dtype() == DType::kQ8_0P) {  // rows interleaved in panels: as Q8_0 rows first
    std::unique_ptr<uint8_t[]> rows(
        new uint8_t[dtype_bytes(DType::kQ8_0, (row_end - row_begin) * cols) + 1]);
    panel_rows_to_q8_0(w, row_begin, row_end, rows.get());
    const Status s = gguf::dequantize(static_cast<uint32_t>(gguf::GgmlType::kQ8_0), rows.get(),
                                      (row_end - row_begin) * cols, out);
    SS_CHECK_MSG(s.ok(), s.ok() ? "" : s.message());
    return;
  }
  const auto* src = static_cast<const uint8_t*>(w.raw()) + dtype_bytes(w.dtype(), row_begin * cols);
  const Status s = gguf::dequantize(static_cast<uint32_t>(ggml_type(w.dtype())), src,
                                    (row_end - row_begin) * cols, out);
  SS_CHECK_MSG(s.ok(), s.ok() ? "" : s.message());
}

std::unique_ptr<uint8_t[]> quantize_activation_rows(ThreadPool& pool, const QuantKernel& k,
                                                    const Tensor& x) {
  const int64_t n = x.size(0), in = x.size(1);
  SS_CHECK_EQ(in % k.act_block_elements, 0);
  const int64_t act_row_bytes = in / k.act_block_elements * int64_t(k.act_block_bytes);
  std::unique_ptr<uint8_t[]> act(new uint8_t[size_t(n * act_row_bytes)]);
  const float* x_data = x.f32();
  pool.parallel_for(n, std::max<int64_t>(1, kMinMacsPerShare / std::max<int64_t>(1, in)),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) {
                        quantize_activations(k.act, x_data + i * in, in,
                                             act.get() + i * act_row_bytes);
                      }
                    });
  return act;
}

bool quant_acts_together() {
  static const bool together = [] {
    const char* pinned = std::getenv(kQuantTogetherEnv);
    return pinned == nullptr || std::strcmp(pinned, "0") != 0;
  }();
  return together;
}

void check_quant_matmul_args(const Tensor& x, const Tensor& w, const Tensor* bias,
                             const Tensor& y) {
  SS_CHECK(x.device() == Device::kCpu && w.device() == Device::kCpu && y.device() == Device::kCpu);
  SS_CHECK(x.dim() == 2 && w.dim() == 2 && y.dim() == 2);
  SS_CHECK_EQ(w.size(1), x.size(1));
  SS_CHECK(y.size(0) == x.size(0) && y.size(1) == w.size(0));
  if (bias != nullptr) SS_CHECK_EQ(bias->numel(), w.size(0));
}

void matmul_quant(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa, int rows_per_pass, QuantActForm form, bool acts_together) {
  check_quant_matmul_args(x, w, bias, y);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  SS_CHECK_MSG(dtype_is_quantized(w.dtype()),
               std::string("matmul_quant weight dtype ") + dtype_name(w.dtype()));
  SS_CHECK_MSG(rows_per_pass == 1 || rows_per_pass == 4,
               "matmul_quant rows_per_pass must be 1 or 4, got " + std::to_string(rows_per_pass));
  if (n == 0 || out == 0) return;
  QuantKernel k = quant_kernel(w.dtype(), isa);
  if (form == QuantActForm::kBlocks) k.prepared = QuantPrepared{};  // kAuto: as kPrepared
  SS_CHECK_EQ(in % k.act_block_elements, 0);                        // rows are whole weight blocks
  const int64_t n_blocks = in / k.act_block_elements;
  const int64_t w_row_bytes = int64_t(dtype_bytes(w.dtype(), in));

  const std::unique_ptr<uint8_t[]> act = quantize_activation_rows(pool, k, x);
  const KernelActs acts =
      prepare_rows(k, act.get(), n_blocks * int64_t(k.act_block_bytes), n, n_blocks);
  const auto dot = k.prepared.prepare ? k.prepared.dot : k.dot;
  const auto dot4 = k.prepared.prepare ? k.prepared.dot4 : k.dot4;

  const auto* w_data = static_cast<const uint8_t*>(w.raw());
  const float* b = bias ? bias->f32() : nullptr;
  float* y_data = y.f32();
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerShare / std::max<int64_t>(1, in * n));
  if (!acts_together) k.dot_acts = nullptr;
  if (k.dot_acts != nullptr && n > 1 && k.prepared.prepare == nullptr) {
    // Each weight row against the activation rows dot_acts_max at a time
    // (4, or 8 on AVX-512): its blocks unpacked once per group of rows
    // instead of once per row.
    const int group = k.dot_acts_max;
    pool.parallel_for(out, grain, [&](int64_t begin, int64_t end) {
      for (int64_t o = begin; o < end; ++o) {
        const uint8_t* w_row = w_data + o * w_row_bytes;
        for (int64_t i = 0; i < n; i += group) {
          const int na = int(std::min<int64_t>(group, n - i));
          float dots[kQuantDotActsMax];
          k.dot_acts(w_row, acts.rows + i * acts.row_bytes, acts.row_bytes, n_blocks, na, dots);
          for (int j = 0; j < na; ++j) y_data[(i + j) * out + o] = dots[j] + (b ? b[o] : 0.0f);
        }
      }
    });
    return;
  }
  pool.parallel_for(out, grain, [&](int64_t begin, int64_t end) {
    for (int64_t o0 = begin; o0 < end; o0 += kTileRows) {
      const int64_t o1 = std::min(o0 + kTileRows, end);
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t* a = acts.rows + i * acts.row_bytes;
        float* y_row = y_data + i * out;
        // Four weight rows per pass (four DRAM streams a core), the last
        // o1 - o0 mod 4 one at a time: both give the same floats per row.
        int64_t o = o0;
        for (; rows_per_pass == 4 && o + 4 <= o1; o += 4) {
          float dots[4];
          dot4(w_data + o * w_row_bytes, w_row_bytes, a, n_blocks, dots);
          for (int r = 0; r < 4; ++r) y_row[o + r] = dots[r] + (b ? b[o + r] : 0.0f);
        }
        for (; o < o1; ++o) {
          y_row[o] = dot(w_data + o * w_row_bytes, a, n_blocks) + (b ? b[o] : 0.0f);
        }
      }
    }
  });
}

}  // namespace specstack::cpu

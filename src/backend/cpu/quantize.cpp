#include "backend/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "base/check.h"

namespace specstack::cpu {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::kQk;
using quant::kQkK;

// The smallest f16 h (from the nearest to `value` upwards) with
// covers(f16_to_f32(h)): the stored scales are rounded up where rounding to
// nearest would shrink the grid below the values it must cover.
template <typename Covers>
uint16_t f16_at_least(float value, Covers covers) {
  uint16_t h = f32_to_f16(value);
  // 0x7BFF is the largest finite f16; weights never come near it.
  while (h < 0x7BFF && !covers(f16_to_f32(h))) ++h;
  return h;
}

void quantize_block_q8_0(const float* x, BlockQ8_0& block) {
  float amax = 0;
  for (int j = 0; j < kQk; ++j) amax = std::max(amax, std::fabs(x[j]));
  block.d = f16_at_least(amax / 127.0f, [&](float d) { return d * 127.0f >= amax; });
  const float d = f16_to_f32(block.d);
  const float id = d > 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < kQk; ++j) {
    const float q = std::round(x[j] * id);
    block.qs[j] = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
  }
}

void quantize_block_q4_k(const float* x, BlockQ4_K& block) {
  constexpr int kSub = kQkK / 32;
  float neg[kSub], hi[kSub];
  float max_neg = 0;
  for (int j = 0; j < kSub; ++j) {
    float lo = 0;  // the grid's bottom is -dmin * m <= 0: a positive minimum becomes 0
    hi[j] = x[32 * j];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi[j] = std::max(hi[j], x[32 * j + l]);
    }
    neg[j] = -lo;
    max_neg = std::max(max_neg, neg[j]);
  }
  block.dmin = max_neg > 0 ? f16_at_least(max_neg / 63.0f,
                                          [&](float dmin) { return max_neg / dmin <= 63.0f; })
                           : 0;
  const float dmin = f16_to_f32(block.dmin);
  int m[kSub], sc[kSub];
  float m_eff[kSub], span[kSub];
  float max_span = 0;
  for (int j = 0; j < kSub; ++j) {
    m[j] = dmin > 0 ? std::clamp(static_cast<int>(std::ceil(neg[j] / dmin)), 0, 63) : 0;
    // The dequantizer's own product must reach the minimum.
    while (m[j] < 63 && dmin * static_cast<float>(m[j]) < neg[j]) ++m[j];
    m_eff[j] = dmin * static_cast<float>(m[j]);
    span[j] = std::max(0.0f, hi[j] + m_eff[j]);
    max_span = std::max(max_span, span[j]);
  }
  block.d = max_span > 0 ? f16_at_least(max_span / (15.0f * 63.0f),
                                        [&](float d) { return max_span / (15.0f * d) <= 63.0f; })
                         : 0;
  const float d = f16_to_f32(block.d);
  for (int j = 0; j < kSub; ++j) {
    sc[j] = d > 0 ? std::clamp(static_cast<int>(std::ceil(span[j] / (15.0f * d))), 0, 63) : 0;
    // The top of the grid as the dequantizer computes it (d * sc, then * 15,
    // then - dmin * m) must reach the maximum.
    while (sc[j] < 63 && (d * static_cast<float>(sc[j])) * 15.0f - m_eff[j] < hi[j]) ++sc[j];
  }
  // 6-bit scales and mins packed as gguf::scale_min_k4 (gguf_dequant.h) unpacks them.
  std::memset(block.scales, 0, sizeof(block.scales));
  for (int j = 0; j < kSub; ++j) {
    if (j < 4) {
      block.scales[j] |= static_cast<uint8_t>(sc[j]);
      block.scales[j + 4] |= static_cast<uint8_t>(m[j]);
    } else {
      block.scales[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
      block.scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      block.scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
  uint8_t q[kQkK];
  for (int j = 0; j < kSub; ++j) {
    const float step = d * static_cast<float>(sc[j]);
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const float v = std::round((x[32 * j + l] + m_eff[j]) * inv);
      q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0.0f, 15.0f));
    }
  }
  // Each 64 values share 32 bytes: the first 32 in the low nibbles.
  for (int g = 0; g < kQkK / 64; ++g) {
    for (int l = 0; l < 32; ++l) {
      block.qs[32 * g + l] = static_cast<uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
  }
}

// Q6_K: 16 sub-blocks of 16 values, each with an int8 scale sc_j of the
// f16 super-block scale d, codes q in [-32, 31] stored as q + 32 (low 4 bits
// in ql, high 2 in qh). Round to nearest on the symmetric grid of step
// d sc_j with sc_j = ceil(amax_j / (31 d)) (and d rounded up), so |x| <= 31
// steps: no value is clipped, each is within half a step.
void quantize_block_q6_k(const float* x, BlockQ6_K& block) {
  constexpr int kSub = kQkK / 16;
  float amax[kSub];
  float max_step = 0;
  for (int j = 0; j < kSub; ++j) {
    amax[j] = 0;
    for (int l = 0; l < 16; ++l) amax[j] = std::max(amax[j], std::fabs(x[16 * j + l]));
    max_step = std::max(max_step, amax[j] / 31.0f);
  }
  block.d = max_step > 0
                ? f16_at_least(max_step / 127.0f, [&](float d) { return max_step / d <= 127.0f; })
                : 0;
  const float d = f16_to_f32(block.d);
  uint8_t q[kQkK];
  for (int j = 0; j < kSub; ++j) {
    int sc = d > 0 ? std::clamp(static_cast<int>(std::ceil(amax[j] / (31.0f * d))), 0, 127) : 0;
    // The dequantizer's own step (d * sc) must reach the largest value in 31 codes.
    while (sc < 127 && (d * static_cast<float>(sc)) * 31.0f < amax[j]) ++sc;
    block.scales[j] = static_cast<int8_t>(sc);
    const float step = d * static_cast<float>(sc);
    const float inv = step > 0 ? 1.0f / step : 0.0f;
    for (int l = 0; l < 16; ++l) {
      const float v = std::round(x[16 * j + l] * inv);
      q[16 * j + l] = static_cast<uint8_t>(std::clamp(v, -32.0f, 31.0f) + 32.0f);
    }
  }
  // Each half of 128 values: value l and l + 64 share ql[l] (low, high
  // nibble), l + 32 and l + 96 share ql[l + 32]; their top 2 bits go to qh[l]
  // at bits 0, 4, 2, 6 (gguf_dequant.cpp's dequant_q6_k reads it back).
  for (int half = 0; half < 2; ++half) {
    const uint8_t* v = q + 128 * half;
    uint8_t* ql = block.ql + 64 * half;
    uint8_t* qh = block.qh + 32 * half;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((v[l] & 0x0F) | ((v[l + 64] & 0x0F) << 4));
      ql[l + 32] = static_cast<uint8_t>((v[l + 32] & 0x0F) | ((v[l + 96] & 0x0F) << 4));
      qh[l] = static_cast<uint8_t>((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) |
                                   ((v[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace

void quantize_row_q6_k(const float* x, int64_t n, void* dst) {
  SS_CHECK_MSG(n % kQkK == 0, "quantize_row_q6_k: length not a multiple of 256");
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_q6_k(x + b * kQkK, blocks[b]);
}

void quantize_row_q8_0(const float* x, int64_t n, void* dst) {
  SS_CHECK_MSG(n % kQk == 0, "quantize_row_q8_0: length not a multiple of 32");
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQk; ++b) quantize_block_q8_0(x + b * kQk, blocks[b]);
}

void quantize_row_q4_k(const float* x, int64_t n, void* dst) {
  SS_CHECK_MSG(n % kQkK == 0, "quantize_row_q4_k: length not a multiple of 256");
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQkK; ++b) quantize_block_q4_k(x + b * kQkK, blocks[b]);
}

Tensor quantize_matrix(const Tensor& w, DType target) {
  SS_CHECK_EQ(w.dim(), 2);
  SS_CHECK_MSG(target == DType::kQ8_0 || target == DType::kQ4_K || target == DType::kQ6_K,
               "quantize_matrix: target must be q8_0, q4_k or q6_k");
  const int64_t rows = w.size(0), cols = w.size(1);
  SS_CHECK_MSG(cols % dtype_block_elements(target) == 0,
               "quantize_matrix: row length not a multiple of the block");
  Tensor out = Tensor::zeros(target, {rows, cols});
  const auto row_bytes = static_cast<int64_t>(dtype_bytes(target, cols));
  auto* dst = static_cast<uint8_t*>(out.raw());
  // Rows split over threads: an 8B model is ~7e9 values to round, which
  // would dominate start-up on one core. Small matrices stay on this one.
  const int64_t n_threads =
      rows * cols < (1 << 20)
          ? 1
          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, std::max<int64_t>(1, rows));
  const int64_t chunk = (rows + n_threads - 1) / n_threads;
  auto work = [&](int64_t t) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = t * chunk; r < std::min(rows, (t + 1) * chunk); ++r) {
      convert_rows_to_f32(w, r, r + 1, row.data());
      if (target == DType::kQ8_0)
        quantize_row_q8_0(row.data(), cols, dst + r * row_bytes);
      else if (target == DType::kQ4_K)
        quantize_row_q4_k(row.data(), cols, dst + r * row_bytes);
      else
        quantize_row_q6_k(row.data(), cols, dst + r * row_bytes);
    }
  };
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < n_threads; ++t) threads.emplace_back(work, t);
  work(0);
  for (auto& thread : threads) thread.join();
  return out;
}

}  // namespace specstack::cpu

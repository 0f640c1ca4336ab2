// The load-time quantizer (backend/cpu/quantize.h): every block it writes is
// read back with the GGUF dequantizer (tested against gguf-py), so these
// tests check the format as llama.cpp reads it, not our own reading of it.
#include "backend/cpu/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "gguf/gguf_dequant.h"
#include "gguf/gguf_types.h"

namespace specstack::cpu {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

std::vector<float> dequant(gguf::GgmlType type, const void* blocks, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  const Status s = gguf::dequantize(static_cast<uint32_t>(type),
                                    static_cast<const uint8_t*>(blocks), n, out.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

// Rows of Gaussian values whose scale spans f16's subnormal range (d below
// 6e-5) up to large weights, plus blocks with a constant, an all-positive
// and an all-negative run, where the min/max handling has edge cases.
std::vector<float> test_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float scales[] = {1e-6f, 3e-4f, 0.02f, 1.0f, 40.0f};
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = normal(rng) * scales[(i / 256) % 5];
  for (int64_t i = 0; i < 32; ++i) x[size_t(i)] = 0.5f;                // constant
  for (int64_t i = 32; i < 64; ++i) x[size_t(i)] = 1.0f + 0.01f * i;   // all positive
  for (int64_t i = 64; i < 96; ++i) x[size_t(i)] = -2.0f - 0.03f * i;  // all negative
  for (int64_t i = 96; i < 128; ++i) x[size_t(i)] = 0.0f;              // zeros
  return x;
}

TEST(QuantizeQ8_0, EveryValueWithinHalfAStepOfTheStoredScale) {
  const int64_t n = 256 * 40;
  const std::vector<float> x = test_values(n, 1);
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(n / 32));
  quantize_row_q8_0(x.data(), n, blocks.data());
  const std::vector<float> y = dequant(gguf::GgmlType::kQ8_0, blocks.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = f16_to_f32(blocks[size_t(b)].d);
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[size_t(b * 32 + j)]));
    // d is amax / 127 rounded to f16 (up where nearest would clip amax).
    EXPECT_GE(d * 127.0f, amax) << "block " << b;
    EXPECT_LE(d, amax / 127.0f * (1.0f + 1.0f / 1024) + 6e-8f) << "block " << b;
    for (int j = 0; j < 32; ++j) {
      const size_t i = size_t(b * 32 + j);
      // d / 2 plus the f32 rounding of x * (1 / d) at a half-way point.
      EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * d * (1 + 1e-6f)) << "value " << i;
    }
  }
}

TEST(QuantizeQ8_0, ValuesOnTheGridRoundTripExactly) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> code(-127, 127);
  const int64_t n = 32 * 16;
  std::vector<float> x(static_cast<size_t>(n));
  std::vector<int8_t> q(static_cast<size_t>(n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const float d = std::ldexp(1.0f, -3 - static_cast<int>(b % 12));  // exact in f16
    for (int j = 0; j < 32; ++j) q[size_t(b * 32 + j)] = static_cast<int8_t>(code(rng));
    q[size_t(b * 32 + b % 32)] = b % 2 ? 127 : -127;  // amax on the grid's end
    for (int j = 0; j < 32; ++j) x[size_t(b * 32 + j)] = d * q[size_t(b * 32 + j)];
  }
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(n / 32));
  quantize_row_q8_0(x.data(), n, blocks.data());
  EXPECT_EQ(dequant(gguf::GgmlType::kQ8_0, blocks.data(), n), x);
  for (int64_t b = 0; b < n / 32; ++b)
    EXPECT_EQ(std::memcmp(blocks[size_t(b)].qs, q.data() + b * 32, 32), 0) << "block " << b;
}

// Sub-block j's step (d * sc_j) and offset (dmin * m_j), as the dequantizer
// computes them.
void q4_k_sub_block(const BlockQ4_K& block, int j, float& step, float& offset) {
  int sc = 0, m = 0;
  gguf::scale_min_k4(j, block.scales, sc, m);
  step = f16_to_f32(block.d) * static_cast<float>(sc);
  offset = f16_to_f32(block.dmin) * static_cast<float>(m);
}

TEST(QuantizeQ4_K, EveryValueWithinHalfItsSubBlockStep) {
  const int64_t n = 256 * 40;
  const std::vector<float> x = test_values(n, 3);
  std::vector<BlockQ4_K> blocks(static_cast<size_t>(n / 256));
  quantize_row_q4_k(x.data(), n, blocks.data());
  const std::vector<float> y = dequant(gguf::GgmlType::kQ4_K, blocks.data(), n);
  double err2 = 0, ref2 = 0;  // for the Gaussian blocks of unit scale
  for (int64_t b = 0; b < n / 256; ++b) {
    for (int j = 0; j < 8; ++j) {
      float step = 0, offset = 0;
      q4_k_sub_block(blocks[size_t(b)], j, step, offset);
      // The derived bound: the 16-level grid [-offset, 15 step - offset]
      // covers the sub-block (codes rounded up), so rounding to the nearest
      // level errs by at most step / 2; the slack is f32 rounding of
      // (x + offset) / step and of the dequantizer's d * sc * q - dmin * m.
      for (int l = 0; l < 32; ++l) {
        const size_t i = size_t(b * 256 + j * 32 + l);
        const float slack = 1e-6f * (std::fabs(x[i]) + offset + 15 * step);
        EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * step + slack) << "value " << i;
        if (b % 5 == 3 && b > 0) {
          err2 += double(x[i] - y[i]) * (x[i] - y[i]);
          ref2 += double(x[i]) * x[i];
        }
      }
    }
  }
  // Measured error of this min/max search on N(0, 1) values (recorded in
  // docs/DESIGN-NOTES.md): the rms error relative to the rms value. A
  // uniform 16-level grid over a 32-value Gaussian range (~±2.1σ) would give
  // 4.2 / 15 / sqrt(12) = 0.081; 6-bit scales rounded up add a little.
  const double rel = std::sqrt(err2 / ref2);
  std::printf("Q4_K rms error / rms value on N(0,1): %.4f\n", rel);
  EXPECT_LT(rel, 0.10);
  EXPECT_GT(rel, 0.05);  // a 4-bit grid cannot do much better: catches a broken comparison
}

TEST(QuantizeQ4_K, ValuesOnTheGridRoundTripExactly) {
  // Power-of-two d and dmin with one sub-block at scale and min 63 make every
  // step of the search exact in f32 (63 * dmin / 63 == dmin, ...), so the
  // quantizer must find the block's own codes again.
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> code6(1, 63), code4(0, 15);
  const int64_t n_blocks = 12;
  std::vector<float> x(static_cast<size_t>(n_blocks * 256));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = std::ldexp(1.0f, -8 - static_cast<int>(b % 4));
    const float dmin = std::ldexp(1.0f, -6 - static_cast<int>(b % 3));
    for (int j = 0; j < 8; ++j) {
      const int sc = j == int(b % 8) ? 63 : code6(rng);
      const int m = j == int((b + 3) % 8) ? 63 : code6(rng);
      for (int l = 0; l < 32; ++l) {
        // Codes 0 and 15 present: the sub-block spans its whole grid.
        const int q = l == 0 ? 0 : l == 1 ? 15 : code4(rng);
        x[size_t(b * 256 + j * 32 + l)] =
            (d * static_cast<float>(sc)) * static_cast<float>(q) - dmin * static_cast<float>(m);
      }
    }
  }
  std::vector<BlockQ4_K> blocks(static_cast<size_t>(n_blocks));
  quantize_row_q4_k(x.data(), n_blocks * 256, blocks.data());
  EXPECT_EQ(dequant(gguf::GgmlType::kQ4_K, blocks.data(), n_blocks * 256), x);
}

TEST(QuantizeQ6_K, EveryValueWithinHalfItsSubBlockStep) {
  const int64_t n = 256 * 40;
  const std::vector<float> x = test_values(n, 6);
  std::vector<BlockQ6_K> blocks(static_cast<size_t>(n / 256));
  quantize_row_q6_k(x.data(), n, blocks.data());
  const std::vector<float> y = dequant(gguf::GgmlType::kQ6_K, blocks.data(), n);
  double err2 = 0, ref2 = 0;
  for (int64_t b = 0; b < n / 256; ++b) {
    const float d = f16_to_f32(blocks[size_t(b)].d);
    for (int j = 0; j < 16; ++j) {
      const float step = d * static_cast<float>(blocks[size_t(b)].scales[j]);
      // The derived bound: sc_j is rounded up so that 31 steps reach the
      // sub-block's largest |x|; no code is clipped, and rounding to the
      // nearest of the symmetric grid errs by at most step / 2 (+ f32 slack
      // of x / step and of the dequantizer's d * sc * q).
      for (int l = 0; l < 16; ++l) {
        const size_t i = size_t(b * 256 + j * 16 + l);
        const float slack = 1e-6f * (std::fabs(x[i]) + 32 * step);
        EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * step + slack) << "value " << i;
        if (b % 5 == 3 && b > 0) {
          err2 += double(x[i] - y[i]) * (x[i] - y[i]);
          ref2 += double(x[i]) * x[i];
        }
      }
    }
  }
  // A 63-level grid over a 16-value Gaussian's ±amax (~±1.8σ, step ≈
  // amax / 31): rms error about (amax / 31) / sqrt(12) ≈ 0.017σ (measured
  // 0.020: the scales rounded up widen the steps a little).
  const double rel = std::sqrt(err2 / ref2);
  std::printf("Q6_K rms error / rms value on N(0,1): %.4f\n", rel);
  EXPECT_LT(rel, 0.025);
  EXPECT_GT(rel, 0.008);
}

TEST(QuantizeQ6_K, ValuesOnTheGridRoundTripExactly) {
  // Power-of-two d, one sub-block per block at scale 127 and codes -31 and 31
  // in every sub-block (so amax = 31 steps): the search finds the codes again.
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> code(-32, 31), scale(1, 127);
  const int64_t n_blocks = 10;
  std::vector<float> x(static_cast<size_t>(n_blocks * 256));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = std::ldexp(1.0f, -10 - static_cast<int>(b % 5));
    for (int j = 0; j < 16; ++j) {
      const int sc = j == int(b % 16) ? 127 : scale(rng);
      for (int l = 0; l < 16; ++l) {
        const int q = l == 0 ? 31 : l == 1 ? -31 : std::max(-31, code(rng));
        x[size_t(b * 256 + j * 16 + l)] = (d * static_cast<float>(sc)) * static_cast<float>(q);
      }
    }
  }
  std::vector<BlockQ6_K> blocks(static_cast<size_t>(n_blocks));
  quantize_row_q6_k(x.data(), n_blocks * 256, blocks.data());
  EXPECT_EQ(dequant(gguf::GgmlType::kQ6_K, blocks.data(), n_blocks * 256), x);
}

TEST(QuantizeMatrix, Bf16MatrixSplitOverThreadsEqualsRowByRow) {
  // 1024 x 1024: above the size where quantize_matrix uses several threads.
  const int64_t rows = 1024, cols = 1024;
  Tensor w = Tensor::zeros(DType::kBF16, {rows, cols});
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto* bits = static_cast<uint16_t*>(w.raw());
  std::vector<float> f32(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    bits[i] = f32_to_bf16(normal(rng));
    f32[size_t(i)] = bf16_to_f32(bits[i]);
  }
  for (DType target : {DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(target));
    const Tensor q = quantize_matrix(w, target);
    ASSERT_EQ(q.dtype(), target);
    ASSERT_EQ(q.shape(), w.shape());
    const size_t row_bytes = dtype_bytes(target, cols);
    std::vector<uint8_t> expected(row_bytes);
    for (int64_t r = 0; r < rows; r += 37) {
      if (target == DType::kQ8_0)
        quantize_row_q8_0(f32.data() + r * cols, cols, expected.data());
      else if (target == DType::kQ4_K)
        quantize_row_q4_k(f32.data() + r * cols, cols, expected.data());
      else
        quantize_row_q6_k(f32.data() + r * cols, cols, expected.data());
      EXPECT_EQ(std::memcmp(static_cast<const uint8_t*>(q.raw()) + r * int64_t(row_bytes),
                            expected.data(), row_bytes),
                0)
          << "row " << r;
    }
  }
}

}  // namespace
}  // namespace specstack::cpu

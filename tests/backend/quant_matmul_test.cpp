// The quantized matmul (backend/cpu/quant_matmul.h) against the dequantized
// weights, for every weight type with a kernel, on the scalar and the AVX2
// kernels, batch 1 and batch > 1, output counts that do not divide evenly
// over the threads or the 16-row tiles.
#include "backend/cpu/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_blocksum.h"
#include "backend/cpu/quant_gemm.h"
#include "backend/cpu/quant_kernels.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::decode_activations;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

struct Shape {
  int64_t n, in, out;
};

class QuantMatmulTest : public ::testing::TestWithParam<DType> {};

// Three references per output y[i, o]:
//  * exact: Σ_k w[o, k] * x̂[i, k] in double, with x̂ the values the int8
//    activation blocks hold. The kernels compute exactly this in integers
//    per block, then f32 across blocks: relative error ~1e-6 of Σ|w x̂|.
//  * f32 activations: Σ w x. Each x̂ - x is at most half an int8 step of its
//    block, max|x_block| / 254, and (Q8_0) the f16 scale moves every product
//    of a block by < 2^-11 relative, so
//      |y - Σ w x| <= Σ_k |w_k| max|x_block(k)| / 254 + 2^-11 Σ |w_k x̂_k| + f32 slack.
//  * scalar vs AVX2: the same integer sums, f32 accumulation in another
//    order: 1e-6 of Σ|w x̂|.
TEST_P(QuantMatmulTest, MatchesDequantizedWeights) {
  const DType dtype = GetParam();
  const int64_t blk = dtype_block_elements(dtype);
  std::vector<Isa> isas{Isa::kScalar};
  if (quant_isa_available(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  ThreadPool pool(3);
  std::mt19937 rng(42 + static_cast<int>(dtype));
  const Shape shapes[] = {{1, blk, 1}, {1, 4 * blk, 37}, {3, 2 * blk, 50}, {17, 3 * blk, 33}};
  for (const Shape& s : shapes) {
    Tensor w = random_quantized(rng, dtype, s.out, s.in);
    Tensor x = random_f32(rng, {s.n, s.in}, -2.0f, 2.0f);
    // A few outliers, as real activations have, so blocks differ in scale.
    for (int64_t i = 0; i < s.n * s.in; i += 97) x.f32()[i] *= 20.0f;
    Tensor bias = random_f32(rng, {s.out});
    std::vector<float> wf(size_t(s.out * s.in));
    dequantize_rows(w, 0, s.out, wf.data());

    const QuantKernel k = quant_kernel(dtype, Isa::kScalar);
    std::vector<uint8_t> act(size_t(s.in / k.act_block_elements) * k.act_block_bytes);
    std::vector<Tensor> results;
    for (Isa isa : isas) {
      Tensor y = Tensor::zeros(DType::kF32, {s.n, s.out});
      matmul_quant(pool, x, w, &bias, y, isa);
      results.push_back(y);
    }
    for (int64_t i = 0; i < s.n; ++i) {
      const float* xi = x.f32() + i * s.in;
      quantize_activations(k.act, xi, s.in, act.data());
      const std::vector<double> xq = decode_activations(k.act, act.data(), s.in);
      for (int64_t o = 0; o < s.out; ++o) {
        const float* wo = wf.data() + o * s.in;
        double exact = bias.f32()[o], plain = bias.f32()[o], mag = 0, half_step = 0;
        for (int64_t c = 0; c < s.in; ++c) {
          exact += double(wo[c]) * xq[size_t(c)];
          plain += double(wo[c]) * xi[c];
          mag += std::fabs(double(wo[c]) * xq[size_t(c)]);
        }
        for (int64_t b0 = 0; b0 < s.in; b0 += k.act_block_elements) {
          double amax = 0, wsum = 0;
          for (int64_t c = b0; c < b0 + k.act_block_elements; ++c) {
            amax = std::max(amax, std::fabs(double(xi[c])));
            wsum += std::fabs(double(wo[c]));
          }
          half_step += wsum * amax / 254.0;
        }
        const double bound = half_step + std::ldexp(mag, -11) + 1e-5 * mag + 1e-6;
        for (size_t t = 0; t < results.size(); ++t) {
          const double got = results[t].f32()[i * s.out + o];
          ASSERT_NEAR(got, exact, 2e-6 * mag + 1e-6)
              << dtype_name(dtype) << " " << isa_name(isas[t]) << " n=" << s.n << " i=" << i
              << " o=" << o;
          ASSERT_NEAR(got, plain, bound) << dtype_name(dtype) << " " << isa_name(isas[t]);
        }
        if (results.size() == 2) {
          ASSERT_NEAR(results[0].f32()[i * s.out + o], results[1].f32()[i * s.out + o],
                      1e-6 * mag + 1e-7)
              << dtype_name(dtype) << " scalar vs avx2, n=" << s.n << " o=" << o;
        }
      }
    }
  }
}

// The public dispatch: matmul() with a quantized weight is the block-sum
// GEMM from matmul_blocksum_min_rows(dtype, isa) rows where the type and isa have it,
// else the int8 kernel on the best isa up to matmul_quant_max_rows() rows,
// and beyond that the
// int8 tiles where the type has them on that isa, up to its row limit (Q8_0:
// the same floats as the int8 kernels, quant_gemm_test), else the f32 GEMM on the dequantized
// weight (no activation rounding: 1e-5).
TEST(QuantMatmul, BlocksumFromNineRowsOrLaterForKQuantsTogether) {
  EXPECT_EQ(matmul_blocksum_min_rows(), 9);
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!quant_isa_available(isa)) continue;
    for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0})
      EXPECT_EQ(matmul_blocksum_min_rows(d, isa), 9) << dtype_name(d) << " " << isa_name(isa);
    const int64_t k_from = !quant_acts_together() || isa == Isa::kScalar ? 9
                           : isa == Isa::kAvx512Vnni                     ? 16
                                                     : matmul_quant_max_rows() + 1;
    for (DType d : {DType::kQ4_K, DType::kQ5_K})
      EXPECT_EQ(matmul_blocksum_min_rows(d, isa), k_from) << dtype_name(d) << " " << isa_name(isa);
  }
}

TEST_P(QuantMatmulTest, DispatchByRowCount) {
  const DType dtype = GetParam();
  ThreadPool pool(2);
  std::mt19937 rng(7);
  const int64_t in = 2 * dtype_block_elements(dtype), out = 41;
  Tensor w = random_quantized(rng, dtype, out, in);
  Tensor wf = Tensor::zeros(DType::kF32, {out, in});
  dequantize_rows(w, 0, out, wf.f32());
  const int64_t max_rows = matmul_quant_max_rows();
  const int64_t blocksum_from = matmul_blocksum_min_rows(dtype, quant_best_isa());
  for (int64_t n : {int64_t{1}, int64_t{5}, blocksum_from - 1, blocksum_from, max_rows,
                    max_rows + 1, int64_t{40}}) {
    Tensor x = random_f32(rng, {n, in});
    Tensor y = Tensor::zeros(DType::kF32, {n, out}), ref = Tensor::zeros(DType::kF32, {n, out});
    matmul(pool, x, w, nullptr, y);
    const bool blocksum =
        n >= blocksum_from &&
        quant_prefill_uses_blocksum(quant_prefill_path(), dtype, quant_best_isa(), n);
    const bool int8_prefill =
        quant_prefill_uses_tiles(quant_prefill_path(), dtype, quant_best_isa(), n);
    if (blocksum) {
      matmul_quant_blocksum(pool, x, w, nullptr, ref, quant_best_isa());
      for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(y.f32()[i], ref.f32()[i]) << n;
    } else if (n <= max_rows || int8_prefill) {
      matmul_quant(pool, x, w, nullptr, ref, quant_best_isa());
      for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(y.f32()[i], ref.f32()[i]) << n;
    } else {
      matmul_large(pool, x, wf, nullptr, ref);
      for (int64_t i = 0; i < n * out; ++i) {
        ASSERT_NEAR(y.f32()[i], ref.f32()[i], 1e-5 * (1 + std::fabs(ref.f32()[i]))) << n;
      }
    }
  }
}

// Four weight rows per pass equal the one-row kernel bit for bit (scalar and
// AVX2; the VNNI twin is in quant_vnni_test).
TEST_P(QuantMatmulTest, FourRowKernelEqualsOneRowBitForBit) {
  std::vector<Isa> isas{Isa::kScalar};
  if (quant_isa_available(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  for (Isa isa : isas) {
    specstack::testing::expect_dot4_equals_dot(GetParam(), isa, 500 + static_cast<int>(GetParam()));
    if (HasFatalFailure()) return;
    specstack::testing::expect_matmul_equals_one_row(GetParam(), isa,
                                                     600 + static_cast<int>(GetParam()));
    if (HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantMatmulTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Q8_K keeps llama.cpp's choices: the value of largest magnitude becomes
// exactly -127 (scale from its sign), and bsums are the 16-value sums.
TEST(QuantActivations, Q8KScaleAndSums) {
  std::mt19937 rng(3);
  Tensor x = random_f32(rng, {256});
  x.f32()[77] = 5.0f;
  quant::BlockQ8_K b;
  quantize_activations(QuantAct::kQ8_K, x.f32(), 256, &b);
  EXPECT_EQ(b.qs[77], -127);
  EXPECT_FLOAT_EQ(b.d, -5.0f / 127.0f);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) sum += b.qs[g * 16 + j];
    EXPECT_EQ(b.bsums[g], sum);
  }
  Tensor zero = Tensor::zeros(DType::kF32, {256});
  quantize_activations(QuantAct::kQ8_K, zero.f32(), 256, &b);
  EXPECT_EQ(b.d, 0.0f);
}

// Ties round to even as llama.cpp's x86 quantizer does: 0.5 steps go to 0, 1.5 to 2.
TEST(QuantActivations, Q80RoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // scale 1: x is its own int8 value
  x[1] = 0.5f;
  x[2] = 1.5f;
  x[3] = -2.5f;
  quant::BlockQ8_0 b;
  quantize_activations(QuantAct::kQ8_0, x.data(), 32, &b);
  EXPECT_EQ(f16_to_f32(b.d), 1.0f);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 0);
  EXPECT_EQ(b.qs[2], 2);
  EXPECT_EQ(b.qs[3], -2);
}

}  // namespace
}  // namespace specstack::cpu

#include "backend/cpu/cpu_elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cpu_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::copy_of;
using specstack::testing::random_f32;
using specstack::testing::random_weight;
using specstack::testing::rel_error;
using specstack::testing::TestWeight;

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<Isa> compiled_isas() {
  std::vector<Isa> isas{Isa::kScalar};
  if (isa_compiled(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  return isas;
}

TEST(CpuExp, RelativeErrorBelowOneMillionth) {
  std::vector<float> x;
  for (float v = -86.8f; v <= 88.7f; v += 0.0137f) x.push_back(v);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (int i = 0; i < 4000; ++i) x.push_back(small(rng));
  x.push_back(0.0f);
  x.push_back(88.72f);
  for (Isa isa : compiled_isas()) {
    std::vector<float> out(x.size());
    exp_f32(x.data(), int64_t(x.size()), out.data(), isa);
    double worst = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(double(x[i]));
      worst = std::max(worst, std::abs(out[i] - ref) / ref);
    }
    EXPECT_LT(worst, 1e-6) << isa_name(isa);
  }
}

TEST(CpuExp, SpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // 9 entries so that the SIMD path sees them in a full vector and the tail.
  std::vector<float> x = {-kInf, kInf, -200.0f, 200.0f, nan, 0.0f, -kInf, -1000.0f, kInf};
  for (Isa isa : compiled_isas()) {
    std::vector<float> out(x.size());
    exp_f32(x.data(), int64_t(x.size()), out.data(), isa);
    EXPECT_EQ(out[0], 0.0f) << isa_name(isa);
    EXPECT_EQ(out[1], kInf) << isa_name(isa);
    EXPECT_EQ(out[2], 0.0f) << isa_name(isa);
    EXPECT_EQ(out[3], kInf) << isa_name(isa);
    EXPECT_TRUE(std::isnan(out[4])) << isa_name(isa);
    EXPECT_EQ(out[5], 1.0f) << isa_name(isa);
    EXPECT_EQ(out[6], 0.0f) << isa_name(isa);
    EXPECT_EQ(out[7], 0.0f) << isa_name(isa);
    EXPECT_EQ(out[8], kInf) << isa_name(isa);
  }
}

std::vector<double> reference_rmsnorm(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t dim = weight.numel(), rows = x.numel() / dim;
  std::vector<double> y(size_t(x.numel()));
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0.0;
    for (int64_t j = 0; j < dim; ++j) sq += double(x.f32()[r * dim + j]) * x.f32()[r * dim + j];
    const double inv = 1.0 / std::sqrt(sq / double(dim) + eps);
    for (int64_t j = 0; j < dim; ++j) {
      y[size_t(r * dim + j)] = weight.f32()[j] * x.f32()[r * dim + j] * inv;
    }
  }
  return y;
}

TEST(CpuRmsnorm, MatchesReferenceAndMayAlias) {
  ThreadPool pool(3);
  std::mt19937 rng(21);
  for (int64_t dim : {1, 7, 64, 100, 257, 896}) {
    for (int64_t rows : {1, 3, 130}) {
      Tensor x = random_f32(rng, {rows, dim}, -3.0f, 3.0f);
      Tensor weight = random_f32(rng, {dim}, 0.5f, 1.5f);
      const float eps = 1e-6f;
      std::vector<double> ref = reference_rmsnorm(x, weight, eps);
      for (Isa isa : compiled_isas()) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " dim=" << dim << " rows=" << rows);
        Tensor y = Tensor::zeros(DType::kF32, {rows, dim});
        rmsnorm(pool, x, weight, eps, y, isa);
        EXPECT_LT(rel_error(y, ref), 1e-6);
        Tensor in_place = copy_of(x);
        rmsnorm(pool, in_place, weight, eps, in_place, isa);
        EXPECT_LT(rel_error(in_place, ref), 1e-6);
      }
    }
  }
}

TEST(CpuRmsnorm, PerHeadViewAndEpsInsideSqrt) {
  ThreadPool pool(2);
  std::mt19937 rng(22);
  const int64_t tokens = 5, heads = 4, head_dim = 16;
  Tensor x = random_f32(rng, {tokens, heads * head_dim});
  Tensor weight = random_f32(rng, {head_dim});
  Tensor per_head = x.reshape({tokens * heads, head_dim});
  std::vector<double> ref = reference_rmsnorm(per_head, weight, 1e-5);
  rmsnorm(pool, per_head, weight, 1e-5f, per_head);
  EXPECT_LT(rel_error(x, ref), 1e-6);  // written through the view

  // An all-zero row divides by sqrt(eps), not by zero.
  Tensor zeros = Tensor::zeros(DType::kF32, {2, head_dim});
  rmsnorm(pool, zeros, weight, 1e-5f, zeros);
  for (int64_t i = 0; i < zeros.numel(); ++i) EXPECT_EQ(zeros.f32()[i], 0.0f);
  // A large eps visibly shrinks the output: eps is inside the sqrt.
  Tensor ones = Tensor::zeros(DType::kF32, {1, 4});
  Tensor unit = Tensor::zeros(DType::kF32, {4});
  for (int j = 0; j < 4; ++j) ones.f32()[j] = unit.f32()[j] = 1.0f;
  rmsnorm(pool, ones, unit, 3.0f, ones);
  EXPECT_FLOAT_EQ(ones.f32()[0], 0.5f);  // 1 / sqrt(1 + 3)
}

TEST(CpuAddInplace, ExactOnBothIsas) {
  ThreadPool pool(3);
  std::mt19937 rng(31);
  for (int64_t n : {1, 7, 100003}) {
    Tensor a = random_f32(rng, {n});
    Tensor b = random_f32(rng, {n});
    for (Isa isa : compiled_isas()) {
      Tensor x = copy_of(a);
      add_inplace(pool, x, b, isa);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x.f32()[i], a.f32()[i] + b.f32()[i]) << i;
    }
  }
}

TEST(CpuSiluMul, MatchesReferenceAndMayAlias) {
  ThreadPool pool(3);
  std::mt19937 rng(41);
  for (int64_t width : {1, 7, 33, 4864}) {
    for (int64_t n : {1, 9}) {
      Tensor gate = random_f32(rng, {n, width}, -12.0f, 12.0f);
      Tensor up = random_f32(rng, {n, width}, -2.0f, 2.0f);
      // exp(100) overflows: silu must still be ~0, not NaN. (Not alone in its
      // tensor: its ~1e-42 reference would dominate the relative error.)
      if (n * width > 1) gate.f32()[0] = -100.0f;
      std::vector<double> ref(size_t(n * width));
      for (int64_t i = 0; i < n * width; ++i) {
        const double g = gate.f32()[i];
        ref[size_t(i)] = g / (1.0 + std::exp(-g)) * up.f32()[i];
      }
      for (Isa isa : compiled_isas()) {
        SCOPED_TRACE(::testing::Message() << isa_name(isa) << " width=" << width << " n=" << n);
        Tensor out = Tensor::zeros(DType::kF32, {n, width});
        silu_mul(pool, gate, up, out, isa);
        EXPECT_LT(rel_error(out, ref), 1e-6);
        if (n * width > 1) {
          EXPECT_FALSE(std::isnan(out.f32()[0]));
          EXPECT_NEAR(out.f32()[0], 0.0f, 1e-30f);
        }
        Tensor aliased = copy_of(gate);
        silu_mul(pool, aliased, up, aliased, isa);
        EXPECT_LT(rel_error(aliased, ref), 1e-6);
      }
    }
  }
}

TEST(CpuSoftmax, StableWithInfinitiesAndMatchesReference) {
  ThreadPool pool(3);
  std::mt19937 rng(51);
  std::bernoulli_distribution masked(0.3);
  for (int64_t cols : {1, 7, 8, 100, 1000}) {
    const int64_t rows = 67;
    Tensor x = random_f32(rng, {rows, cols}, -30.0f, 30.0f);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (masked(rng)) x.f32()[i] = -kInf;
    }
    x.f32()[cols] += 5000.0f;  // row 1: large values must not overflow
    for (int64_t j = 0; j < cols; ++j) x.f32()[2 * cols + j] = -kInf;  // row 2: fully masked
    std::vector<double> ref(size_t(x.numel()));
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x.f32() + r * cols;
      double max = -kInf, sum = 0.0;
      for (int64_t j = 0; j < cols; ++j) max = std::max(max, double(row[j]));
      for (int64_t j = 0; j < cols; ++j) sum += max == -kInf ? 0.0 : std::exp(row[j] - max);
      for (int64_t j = 0; j < cols; ++j) {
        ref[size_t(r * cols + j)] = max == -kInf ? 0.0 : std::exp(row[j] - max) / sum;
      }
    }
    for (Isa isa : compiled_isas()) {
      SCOPED_TRACE(::testing::Message() << isa_name(isa) << " cols=" << cols);
      Tensor y = copy_of(x);
      softmax_rows(pool, y, isa);
      EXPECT_LT(rel_error(y, ref), 1e-6);
      for (int64_t i = 0; i < y.numel(); ++i) ASSERT_FALSE(std::isnan(y.f32()[i])) << i;
      for (int64_t j = 0; j < cols; ++j) EXPECT_EQ(y.f32()[2 * cols + j], 0.0f);
      for (int64_t i = 0; i < y.numel(); ++i) {
        if (x.f32()[i] == -kInf) {
          ASSERT_EQ(y.f32()[i], 0.0f) << i;
        }
      }
    }
  }
}

// inv_freq as HF builds it: 1 / base^(2j / head_dim), in fp32.
Tensor make_inv_freq(int64_t head_dim, double base) {
  Tensor f = Tensor::zeros(DType::kF32, {head_dim / 2});
  for (int64_t j = 0; j < head_dim / 2; ++j) {
    f.f32()[j] = float(1.0 / std::pow(base, double(2 * j) / double(head_dim)));
  }
  return f;
}

TEST(CpuRope, MatchesRotateHalfFormulaAtLargePositions) {
  ThreadPool pool(3);
  std::mt19937 rng(61);
  for (int64_t head_dim : {2, 64, 128}) {
    const int64_t heads = 3;
    const Tensor inv_freq = make_inv_freq(head_dim, 1e6);
    std::vector<int32_t> positions = {0, 1, 4095, 131071, 7, 130000, 65536};
    for (int i = 0; i < 60; ++i) positions.push_back(int32_t(rng() % 131072));
    const int64_t n = int64_t(positions.size());
    Tensor x = random_f32(rng, {n, heads * head_dim});
    const int64_t half = head_dim / 2;
    std::vector<double> ref(size_t(x.numel()));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* lo = x.f32() + r * heads * head_dim + h * head_dim;
        for (int64_t j = 0; j < half; ++j) {
          // The angle is the fp32 product, as torch computes freqs; only the
          // trigonometry is done in double here.
          const float angle = float(positions[size_t(r)]) * inv_freq.f32()[j];
          const double c = std::cos(double(angle)), s = std::sin(double(angle));
          const size_t base = size_t(r * heads * head_dim + h * head_dim + j);
          ref[base] = lo[j] * c - lo[j + half] * s;
          ref[base + size_t(half)] = lo[j + half] * c + lo[j] * s;
        }
      }
    }
    Tensor y = copy_of(x);
    rope(pool, y, head_dim, positions, inv_freq);
    EXPECT_LT(rel_error(y, ref), 1e-6) << "head_dim=" << head_dim;
    // Position 0 is the identity.
    for (int64_t j = 0; j < heads * head_dim; ++j) EXPECT_EQ(y.f32()[j], x.f32()[j]);
  }
}

TEST(CpuEmbedding, GathersAndConvertsEveryDtype) {
  ThreadPool pool(3);
  std::mt19937 rng(71);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t dim : {1, 33, 896}) {
      const int64_t vocab = 50;
      TestWeight table = random_weight(rng, dtype, vocab, dim);
      std::vector<int32_t> ids = {0, 49, 3, 3};
      for (int i = 0; i < 60; ++i) ids.push_back(int32_t(rng() % vocab));
      for (Isa isa : compiled_isas()) {
        Tensor out = Tensor::zeros(DType::kF32, {int64_t(ids.size()), dim});
        embedding(pool, table.tensor, ids, out, isa);
        for (size_t i = 0; i < ids.size(); ++i) {
          for (int64_t j = 0; j < dim; ++j) {
            ASSERT_EQ(out.f32()[int64_t(i) * dim + j],
                      float(table.values[size_t(ids[i] * dim + j)]))
                << dtype_name(dtype) << " " << isa_name(isa) << " row " << i << " col " << j;
          }
        }
      }
    }
  }
}

TEST(CpuEmbeddingDeathTest, IdOutOfRangeIsABug) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ThreadPool pool(1);
  Tensor table = Tensor::zeros(DType::kBF16, {4, 8});
  Tensor out = Tensor::zeros(DType::kF32, {1, 8});
  std::vector<int32_t> ids = {4};
  EXPECT_DEATH(embedding(pool, table, ids, out), "id < vocab");
}

}  // namespace
}  // namespace specstack::cpu

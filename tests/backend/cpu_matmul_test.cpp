#include "backend/cpu/cpu_matmul.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cpu_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::random_f32;
using specstack::testing::random_weight;
using specstack::testing::rel_error;
using specstack::testing::TestWeight;

constexpr double kTolerance = 1e-5;

// y = x · wᵀ + bias in double, from the exact values the weight holds.
std::vector<double> reference_matmul(const Tensor& x, const TestWeight& w, const Tensor* bias) {
  const int64_t n = x.size(0), in = x.size(1), out = w.tensor.size(0);
  std::vector<double> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias ? bias->f32()[o] : 0.0;
      for (int64_t k = 0; k < in; ++k)
        sum += double(x.f32()[i * in + k]) * w.values[size_t(o * in + k)];
      y[size_t(i * out + o)] = sum;
    }
  }
  return y;
}

struct Case {
  DType dtype;
  int64_t in;
  int64_t out;
};

std::vector<Isa> compiled_isas() {
  std::vector<Isa> isas{Isa::kScalar};
  if (isa_compiled(Isa::kAvx2)) isas.push_back(Isa::kAvx2);
  return isas;
}

// Every weight dtype, odd sizes (tails of the 8/16/32-wide loops), every row
// count around the small/large crossover, with and without bias, on both
// paths and both instruction sets.
TEST(CpuMatmul, MatchesDoubleReferenceAllPathsAndDtypes) {
  ThreadPool pool(3);
  std::mt19937 rng(1234);
  const int64_t row_counts[] = {1, 2, 3, 5, 8, 9, 17, 64, 130};
  const std::pair<int64_t, int64_t> sizes[] = {{1, 7},     {7, 33},  {33, 100},
                                               {100, 257}, {257, 1}, {257, 33}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (auto [in, out] : sizes) {
      TestWeight w = random_weight(rng, dtype, out, in);
      Tensor bias = random_f32(rng, {out});
      for (int64_t n : row_counts) {
        const bool with_bias = (n + in) % 2 == 1;
        const Tensor* b = with_bias ? &bias : nullptr;
        SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n << " in=" << in
                                          << " out=" << out << " bias=" << with_bias);
        Tensor x = random_f32(rng, {n, in});
        std::vector<double> ref = reference_matmul(x, w, b);

        Tensor y_large = Tensor::zeros(DType::kF32, {n, out});
        matmul_large(pool, x, w.tensor, b, y_large);
        EXPECT_LT(rel_error(y_large, ref), kTolerance);
        for (Isa isa : compiled_isas()) {
          SCOPED_TRACE(isa_name(isa));
          Tensor y_small = Tensor::zeros(DType::kF32, {n, out});
          matmul_small(pool, x, w.tensor, b, y_small, isa);
          EXPECT_LT(rel_error(y_small, ref), kTolerance);
          // The two paths agree with each other, not just with the reference.
          EXPECT_LT(rel_error(y_small, y_large), kTolerance);
        }
        Tensor y = Tensor::zeros(DType::kF32, {n, out});
        matmul(pool, x, w.tensor, b, y);
        EXPECT_LT(rel_error(y, ref), kTolerance);
      }
    }
  }
}

// Realistic widths (a multiple of 32 plus a tail) exercise the unrolled main
// loops of the matvec with each x-row group size, and many output rows spread
// matmul_large over several tiles.
TEST(CpuMatmul, WideRowsAndManyTiles) {
  ThreadPool pool(2);
  std::mt19937 rng(99);
  const int64_t in = 896 + 5, out = 600;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    TestWeight w = random_weight(rng, dtype, out, in);
    for (int64_t n : {1, 4, 8, 40}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " n=" << n);
      Tensor x = random_f32(rng, {n, in});
      std::vector<double> ref = reference_matmul(x, w, nullptr);
      Tensor y_small = Tensor::zeros(DType::kF32, {n, out});
      Tensor y_large = Tensor::zeros(DType::kF32, {n, out});
      matmul_small(pool, x, w.tensor, nullptr, y_small);
      matmul_large(pool, x, w.tensor, nullptr, y_large);
      EXPECT_LT(rel_error(y_small, ref), kTolerance);
      EXPECT_LT(rel_error(y_large, ref), kTolerance);
    }
  }
}

// Weights are used where they lie (e.g. an mmap'd file): a view into foreign
// memory, with rows sliced from a larger matrix.
TEST(CpuMatmul, ReadsWeightViewsInPlace) {
  ThreadPool pool(2);
  std::mt19937 rng(5);
  TestWeight full = random_weight(rng, DType::kBF16, 50, 19);
  auto storage = std::make_shared<std::vector<uint16_t>>(full.tensor.data<uint16_t>(),
                                                         full.tensor.data<uint16_t>() + 50 * 19);
  Tensor view = Tensor::view(storage->data(), DType::kBF16, {50, 19}, storage);
  Tensor rows = view.slice_rows(10, 40);
  TestWeight sliced{
      rows, std::vector<double>(full.values.begin() + 10 * 19, full.values.begin() + 40 * 19)};
  for (int64_t n : {2, 20}) {
    Tensor x = random_f32(rng, {n, 19});
    Tensor y = Tensor::zeros(DType::kF32, {n, 30});
    matmul(pool, x, rows, nullptr, y);
    EXPECT_LT(rel_error(y, reference_matmul(x, sliced, nullptr)), kTolerance) << "n=" << n;
  }
}

TEST(CpuMatmul, NoInputFeaturesGivesBias) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  Tensor x = Tensor::zeros(DType::kF32, {12, 0});
  Tensor w = Tensor::zeros(DType::kBF16, {5, 0});
  Tensor bias = random_f32(rng, {5});
  for (int64_t n : {3, 12}) {
    Tensor xs = x.slice_rows(0, n);
    Tensor y = random_f32(rng, {n, 5});
    matmul(pool, xs, w, &bias, y);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t o = 0; o < 5; ++o) EXPECT_EQ(y.f32()[i * 5 + o], bias.f32()[o]);
    }
  }
}

TEST(CpuMatmul, ConvertRowsIsExactOnBothIsas) {
  std::mt19937 rng(11);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    TestWeight w = random_weight(rng, dtype, 9, 13);
    for (Isa isa : compiled_isas()) {
      std::vector<float> out(size_t(5 * 13));
      convert_rows_to_f32(w.tensor, 3, 8, out.data(), isa);
      for (int64_t i = 0; i < 5 * 13; ++i) {
        ASSERT_EQ(out[size_t(i)], float(w.values[size_t(3 * 13 + i)]))
            << dtype_name(dtype) << " " << isa_name(isa) << " i=" << i;
      }
    }
  }
}

TEST(CpuMatmul, F16SubnormalsAndSpecialValuesConvertLikeScalar) {
  // Every f16 bit pattern, through the SIMD and scalar converters.
  Tensor w = Tensor::zeros(DType::kF16, {1 << 16, 1});
  for (int i = 0; i < (1 << 16); ++i) w.data<uint16_t>()[i] = uint16_t(i);
  std::vector<float> simd(1 << 16), scalar(1 << 16);
  convert_rows_to_f32(w, 0, 1 << 16, simd.data(), kNativeIsa);
  convert_rows_to_f32(w, 0, 1 << 16, scalar.data(), Isa::kScalar);
  for (int i = 0; i < (1 << 16); ++i) {
    if (std::isnan(scalar[size_t(i)])) {
      EXPECT_TRUE(std::isnan(simd[size_t(i)])) << i;
    } else {
      ASSERT_EQ(simd[size_t(i)], scalar[size_t(i)]) << "bits " << i;
    }
  }
}

}  // namespace
}  // namespace specstack::cpu

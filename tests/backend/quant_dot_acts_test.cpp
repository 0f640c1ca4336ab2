// QuantKernel::dot_acts (one K-quant weight row against up to four
// activation rows, each weight block unpacked once) against the one-row
// kernel of the same isa: equal bit for bit per activation row, directly and
// through matmul_quant, on every SIMD isa this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::float_bits;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

class QuantDotActsTest : public ::testing::TestWithParam<std::tuple<Isa, DType>> {
 protected:
  Isa isa() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    if (!quant_isa_available(isa())) GTEST_SKIP() << "this CPU lacks " << isa_name(isa());
  }
};

// na = 1..4 activation rows (rows of a 6-row buffer, so a kernel that read
// past na would pick up other values, and a stride of one row), n = 1..5
// super-blocks; random bytes reach every code, outliers vary the scales.
TEST_P(QuantDotActsTest, EqualsTheOneRowKernelPerActivationRow) {
  const QuantKernel k = quant_kernel(dtype(), isa());
  ASSERT_NE(k.dot_acts, nullptr) << dtype_name(dtype()) << " on " << isa_name(isa());
  std::mt19937 rng(31 + static_cast<int>(dtype()) * 7 + static_cast<int>(isa()));
  for (int64_t n_blocks : {1, 2, 3, 5}) {
    const int64_t in = n_blocks * 256;
    const int64_t act_bytes = n_blocks * int64_t(k.act_block_bytes);
    for (int trial = 0; trial < 6; ++trial) {
      Tensor w = random_quantized(rng, dtype(), 1, in);
      std::vector<uint8_t> act(size_t((1 + kQuantDotActsMax) * act_bytes));
      for (int r = 0; r <= kQuantDotActsMax; ++r) {
        Tensor x = random_f32(rng, {in}, -2.0f, 2.0f);
        for (int64_t i = (trial + r) % 5; i < in; i += 37) x.f32()[i] *= 25.0f;
        quantize_activations(k.act, x.f32(), in, act.data() + r * act_bytes);
      }
      ASSERT_GE(k.dot_acts_max, 4);
      ASSERT_LE(k.dot_acts_max, kQuantDotActsMax);
      for (int na = 1; na <= k.dot_acts_max; ++na) {
        float out[kQuantDotActsMax];
        std::fill(out, out + kQuantDotActsMax, -1.0f);
        k.dot_acts(w.raw(), act.data() + act_bytes, act_bytes, n_blocks, na, out);
        for (int j = 0; j < na; ++j) {
          const float one = k.dot(w.raw(), act.data() + (1 + j) * act_bytes, n_blocks);
          ASSERT_EQ(float_bits(out[j]), float_bits(one))
              << dtype_name(dtype()) << " " << isa_name(isa()) << " n_blocks=" << n_blocks
              << " trial=" << trial << " na=" << na << " row " << j;
        }
      }
    }
  }
}

// matmul_quant with the rows together (the default) equals one x row per
// pass (acts_together = false) and the one-row kernel, for 2..17 x rows
// (groups of dot_acts_max, 4 or 8, and a ragged last group), threads and bias.
TEST_P(QuantDotActsTest, MatmulEqualsOneRowPerPass) {
  ThreadPool pool(3);
  std::mt19937 rng(57 + static_cast<int>(dtype()));
  const int64_t in = 3 * 256, out = 11;
  for (int64_t n = 2; n <= 17; ++n) {
    Tensor w = random_quantized(rng, dtype(), out, in);
    Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
    Tensor bias = random_f32(rng, {out});
    Tensor ya = Tensor::zeros(DType::kF32, {n, out}), yb = Tensor::zeros(DType::kF32, {n, out});
    matmul_quant(pool, x, w, &bias, ya, isa(), 4, QuantActForm::kAuto, true);
    matmul_quant(pool, x, w, &bias, yb, isa(), 4, QuantActForm::kAuto, false);
    for (int64_t i = 0; i < n * out; ++i)
      ASSERT_EQ(float_bits(ya.f32()[i]), float_bits(yb.f32()[i]))
          << dtype_name(dtype()) << " " << isa_name(isa()) << " n=" << n << " at " << i;
  }
  specstack::testing::expect_matmul_equals_one_row(dtype(), isa(), 77 + static_cast<int>(dtype()));
}

INSTANTIATE_TEST_SUITE_P(
    IsasTypes, QuantDotActsTest,
    ::testing::Combine(::testing::Values(Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni),
                       ::testing::Values(DType::kQ4_K, DType::kQ5_K, DType::kQ6_K)),
    [](const auto& info) {
      return std::string(isa_name(std::get<0>(info.param))) + "_" +
             dtype_name(std::get<1>(info.param));
    });

// Only the K-quants on the SIMD isas have it; the scalar isa and the
// 32-blocks run one activation row per pass.
TEST(QuantDotActs, OnlyForKQuantsOnSimd) {
  for (DType d : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0, DType::kQ4_0})
    EXPECT_EQ(quant_kernel(d, Isa::kScalar).dot_acts, nullptr) << dtype_name(d);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!quant_isa_available(isa)) continue;
    for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0})
      EXPECT_EQ(quant_kernel(d, isa).dot_acts, nullptr) << dtype_name(d) << " " << isa_name(isa);
  }
}

// SPECSTACK_QUANT_TOGETHER: unset (or anything but "0") keeps the rows
// together in matmul().
TEST(QuantDotActs, TogetherUnlessTheVariableSaysZero) {
  const char* pinned = std::getenv(kQuantTogetherEnv);
  EXPECT_EQ(quant_acts_together(), pinned == nullptr || std::string(pinned) != "0");
}

}  // namespace
}  // namespace specstack::cpu

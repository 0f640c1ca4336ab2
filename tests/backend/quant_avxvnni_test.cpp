// The AVX-VNNI quantized kernels: the AVX2 sources built again with
// vpdpbusd / vpdpwssd for their integer dots (quant_simd_avx2.h), so every
// kernel must give the AVX2 kernel's floats bit for bit: one-row and
// four-row dots, Q4_0 on prepared activations, matmul_quant (both
// activation forms) and the register tiles of matmul_quant_tiled. Skipped
// on CPUs without AVX-VNNI (it is on Intel cores since Alder Lake and
// Sapphire Rapids; the development VM has it).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/quant_gemm.h"
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

constexpr const char* kNoAvxVnni = "this CPU lacks AVX-VNNI (CPUID.7.1:EAX bit 4)";

class QuantAvxVnniTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!quant_isa_available(Isa::kAvxVnni)) GTEST_SKIP() << kNoAvxVnni;
    ASSERT_TRUE(quant_isa_available(Isa::kAvx2)) << "AVX-VNNI without AVX2";
  }
};

// One row and four rows (rows two apart) of n = 1 .. 17 blocks against one
// activation row: random bytes reach every code (Q8_0 weights include
// -128, the most maddubs's int16 pairs meet), activations with outliers.
TEST_P(QuantAvxVnniTest, DotsEqualAvx2BitForBit) {
  const DType dtype = GetParam();
  const QuantKernel avx2 = quant_kernel(dtype, Isa::kAvx2);
  const QuantKernel vnni = quant_kernel(dtype, Isa::kAvxVnni);
  ASSERT_EQ(vnni.act, avx2.act);
  ASSERT_EQ(vnni.prepared.bytes_per_block, avx2.prepared.bytes_per_block);
  std::mt19937 rng(4321 + static_cast<int>(dtype));
  const int64_t blk = dtype_block_elements(dtype);
  for (int64_t n_blocks : {1, 2, 3, 4, 5, 8, 11, 17}) {
    for (int trial = 0; trial < 12; ++trial) {
      const int64_t in = n_blocks * blk;
      Tensor w = random_quantized(rng, dtype, 8, in);
      Tensor x = random_f32(rng, {in}, -2.0f, 2.0f);
      for (int64_t i = trial % 7; i < in; i += 29) x.f32()[i] *= 30.0f;
      std::vector<uint8_t> act(size_t(in / vnni.act_block_elements) * vnni.act_block_bytes);
      quantize_activations(vnni.act, x.f32(), in, act.data());
      const int64_t row_bytes = int64_t(dtype_bytes(dtype, in));
      const auto* base = static_cast<const uint8_t*>(w.raw());
      const std::string where = std::string(dtype_name(dtype)) +
                                " n_blocks=" + std::to_string(n_blocks) +
                                " trial=" + std::to_string(trial);
      ASSERT_EQ(float_bits(vnni.dot(base, act.data(), n_blocks)),
                float_bits(avx2.dot(base, act.data(), n_blocks)))
          << where;
      float fa[4], fv[4];
      avx2.dot4(base, 2 * row_bytes, act.data(), n_blocks, fa);
      vnni.dot4(base, 2 * row_bytes, act.data(), n_blocks, fv);
      for (int r = 0; r < 4; ++r) ASSERT_EQ(float_bits(fv[r]), float_bits(fa[r])) << where;
      if (vnni.prepared.bytes_per_block == 0) continue;
      std::vector<uint8_t> pa(size_t(n_blocks * avx2.prepared.bytes_per_block) + 64);
      std::vector<uint8_t> pv(pa.size());
      avx2.prepared.prepare(act.data(), n_blocks, pa.data());
      vnni.prepared.prepare(act.data(), n_blocks, pv.data());
      ASSERT_EQ(pv, pa) << where << ": prepared activations";
      ASSERT_EQ(float_bits(vnni.prepared.dot(base, pv.data(), n_blocks)),
                float_bits(avx2.prepared.dot(base, pa.data(), n_blocks)))
          << where;
      vnni.prepared.dot4(base, 2 * row_bytes, pv.data(), n_blocks, fv);
      avx2.prepared.dot4(base, 2 * row_bytes, pa.data(), n_blocks, fa);
      for (int r = 0; r < 4; ++r) ASSERT_EQ(float_bits(fv[r]), float_bits(fa[r])) << where;
    }
  }
}

// matmul_quant (threads, four-row passes and tails, bias, both activation
// forms) and, for the 32-blocks, the register tiles: AVX-VNNI = AVX2 on
// every output. The tile shapes leave remainders in both directions.
TEST_P(QuantAvxVnniTest, MatmulsEqualAvx2BitForBit) {
  const DType dtype = GetParam();
  const int64_t blk = dtype_block_elements(dtype);
  ThreadPool pool(3);
  std::mt19937 rng(77 + static_cast<int>(dtype));
  const bool tiles = quant_tile(dtype, Isa::kAvxVnni).fn != nullptr;
  ASSERT_EQ(tiles, quant_tile(dtype, Isa::kAvx2).fn != nullptr);
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 7 * blk, 37},
                            {5, 2 * blk, 50},
                            {19, 3 * blk, 33}}) {
    Tensor w = random_quantized(rng, dtype, out, in);
    Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
    Tensor bias = random_f32(rng, {out});
    for (QuantActForm form : {QuantActForm::kAuto, QuantActForm::kBlocks}) {
      Tensor ya = Tensor::zeros(DType::kF32, {n, out}), yv = Tensor::zeros(DType::kF32, {n, out});
      matmul_quant(pool, x, w, &bias, ya, Isa::kAvx2, 4, form);
      matmul_quant(pool, x, w, &bias, yv, Isa::kAvxVnni, 4, form);
      for (int64_t i = 0; i < n * out; ++i)
        ASSERT_EQ(float_bits(yv.f32()[i]), float_bits(ya.f32()[i]))
            << dtype_name(dtype) << " n=" << n << " at " << i;
    }
    if (!tiles) continue;
    Tensor ya = Tensor::zeros(DType::kF32, {n, out}), yv = Tensor::zeros(DType::kF32, {n, out});
    matmul_quant_tiled(pool, x, w, &bias, ya, Isa::kAvx2);
    matmul_quant_tiled(pool, x, w, &bias, yv, Isa::kAvxVnni);
    for (int64_t i = 0; i < n * out; ++i)
      ASSERT_EQ(float_bits(yv.f32()[i]), float_bits(ya.f32()[i]))
          << dtype_name(dtype) << " tiled n=" << n << " at " << i;
  }
}

// The AVX-VNNI four-row kernels equal its one-row kernels, directly and
// through matmul_quant (as every isa's must: quant_rows_check.h).
TEST_P(QuantAvxVnniTest, FourRowKernelEqualsOneRowBitForBit) {
  specstack::testing::expect_dot4_equals_dot(GetParam(), Isa::kAvxVnni,
                                             900 + static_cast<int>(GetParam()));
  if (HasFatalFailure()) return;
  specstack::testing::expect_matmul_equals_one_row(GetParam(), Isa::kAvxVnni,
                                                   950 + static_cast<int>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Types, QuantAvxVnniTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace specstack::cpu

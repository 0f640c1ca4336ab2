// The AVX-512 VNNI quantized kernels (quant_kernels_avx512.cpp) against
// their scalar and AVX2 twins, and the run-time choice of isa
// (quant_isa.cpp). The kernel tests need a CPU with AVX-512 F / BW / VL /
// VNNI and skip elsewhere (the development VM and the device machine's host
// CPU have it; CI's machine may not).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::decode_activations;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

constexpr const char* kNoVnni =
    "no AVX-512 F/BW/VL/VNNI (or no OS zmm state) on this CPU: the VNNI kernels are not "
    "testable here (they run on the device machine)";

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

class QuantVnniTest : public ::testing::TestWithParam<DType> {};

// One weight row of n blocks times one activation row, n = 1 .. 17 (odd
// counts exercise the 32-blocks' one-block tail). Random bytes reach every
// code: Q8_0 weights include -128, Q6_K scales -128, activations with
// outliers make blocks of different scales.
//  * VNNI vs AVX2: the same int32 lanes and the same f32 order (the file's
//    header says why), so equal bit for bit.
//  * VNNI vs scalar: the same integer sum per block, f32 accumulation in
//    another order: within 1e-6 of Σ_b |d_b · sum_b|, bounded here by the
//    kernels' f32 magnitude Σ|w x̂| computed from the dequantized values.
TEST_P(QuantVnniTest, DotEqualsAvx2BitForBitAndScalarClosely) {
  if (!quant_isa_available(Isa::kAvx512Vnni)) GTEST_SKIP() << kNoVnni;
  ASSERT_TRUE(quant_isa_available(Isa::kAvx2)) << "AVX-512 VNNI without AVX2";
  const DType dtype = GetParam();
  const QuantKernel scalar = quant_kernel(dtype, Isa::kScalar);
  const QuantKernel avx2 = quant_kernel(dtype, Isa::kAvx2);
  const QuantKernel vnni = quant_kernel(dtype, Isa::kAvx512Vnni);
  ASSERT_EQ(vnni.act, scalar.act);
  std::mt19937 rng(1234 + static_cast<int>(dtype));
  const int64_t blk = dtype_block_elements(dtype);
  for (int64_t n_blocks : {1, 2, 3, 4, 5, 8, 11, 17}) {
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t in = n_blocks * blk;
      Tensor w = random_quantized(rng, dtype, 1, in);
      Tensor x = random_f32(rng, {in}, -2.0f, 2.0f);
      for (int64_t i = trial % 7; i < in; i += 29) x.f32()[i] *= 30.0f;
      std::vector<uint8_t> act(size_t(in / vnni.act_block_elements) * vnni.act_block_bytes);
      quantize_activations(vnni.act, x.f32(), in, act.data());
      std::vector<float> wf(static_cast<size_t>(in));
      dequantize_rows(w, 0, 1, wf.data());
      const float s = scalar.dot(w.raw(), act.data(), n_blocks);
      const float a = avx2.dot(w.raw(), act.data(), n_blocks);
      const float v = vnni.dot(w.raw(), act.data(), n_blocks);
      ASSERT_EQ(bits_of(v), bits_of(a)) << dtype_name(dtype) << " n_blocks=" << n_blocks
                                        << " trial=" << trial << ": vnni " << v << " avx2 " << a;
      const std::vector<double> xq = decode_activations(vnni.act, act.data(), in);
      double mag = 0;
      for (int64_t c = 0; c < in; ++c) mag += std::fabs(double(wf[size_t(c)]) * xq[size_t(c)]);
      ASSERT_NEAR(v, s, 1e-6 * mag + 1e-7)
          << dtype_name(dtype) << " n_blocks=" << n_blocks << " trial=" << trial;
    }
  }
}

// Through matmul_quant (threads, 16-row tiles, bias): VNNI equals AVX2 bit
// for bit on every output.
TEST_P(QuantVnniTest, MatmulEqualsAvx2BitForBit) {
  if (!quant_isa_available(Isa::kAvx512Vnni)) GTEST_SKIP() << kNoVnni;
  const DType dtype = GetParam();
  const int64_t blk = dtype_block_elements(dtype);
  ThreadPool pool(3);
  std::mt19937 rng(99 + static_cast<int>(dtype));
  for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 7 * blk, 37},
                            {5, 2 * blk, 50},
                            {16, 3 * blk, 33}}) {
    Tensor w = random_quantized(rng, dtype, out, in);
    Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
    Tensor bias = random_f32(rng, {out});
    Tensor ya = Tensor::zeros(DType::kF32, {n, out}), yv = Tensor::zeros(DType::kF32, {n, out});
    matmul_quant(pool, x, w, &bias, ya, Isa::kAvx2);
    matmul_quant(pool, x, w, &bias, yv, Isa::kAvx512Vnni);
    for (int64_t i = 0; i < n * out; ++i) {
      ASSERT_EQ(bits_of(yv.f32()[i]), bits_of(ya.f32()[i]))
          << dtype_name(dtype) << " n=" << n << " at " << i;
    }
  }
}

// The VNNI four-row kernel equals the VNNI one-row kernel bit for bit,
// directly and through matmul_quant (1 .. 9 output rows: four-row passes
// and one-row tails).
TEST_P(QuantVnniTest, FourRowKernelEqualsOneRowBitForBit) {
  if (!quant_isa_available(Isa::kAvx512Vnni)) GTEST_SKIP() << kNoVnni;
  specstack::testing::expect_dot4_equals_dot(GetParam(), Isa::kAvx512Vnni,
                                             700 + static_cast<int>(GetParam()));
  if (HasFatalFailure()) return;
  specstack::testing::expect_matmul_equals_one_row(GetParam(), Isa::kAvx512Vnni,
                                                   800 + static_cast<int>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Types, QuantVnniTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K,
                                           DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(QuantIsa, ParseNamesRoundTrip) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    Isa parsed = Isa::kScalar;
    ASSERT_TRUE(parse_quant_isa(isa_name(isa), &parsed)) << isa_name(isa);
    EXPECT_EQ(parsed, isa);
  }
  Isa unchanged = Isa::kAvx2;
  for (const char* bad : {"", "AVX2", "avx512", "vnni", "avx2 ", "avx-vnni", "avx_vnni"}) {
    EXPECT_FALSE(parse_quant_isa(bad, &unchanged)) << bad;
  }
  EXPECT_FALSE(parse_quant_isa(nullptr, &unchanged));
  EXPECT_EQ(unchanged, Isa::kAvx2);
}

// Unset: the fastest available, no note. A name this CPU has: that one. An
// unknown name, or one the CPU lacks: the fastest, with a note naming it.
TEST(QuantIsa, ChoiceFollowsTheVariableAndTheCpu) {
  const Isa fastest = quant_isa_available(Isa::kAvx512Vnni) ? Isa::kAvx512Vnni
                      : quant_isa_available(Isa::kAvxVnni)  ? Isa::kAvxVnni
                      : quant_isa_available(Isa::kAvx2)     ? Isa::kAvx2
                                                            : Isa::kScalar;
  std::string note = "stale";
  EXPECT_EQ(choose_quant_isa(nullptr, &note), fastest);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_isa("", &note), fastest);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_isa("scalar", &note), Isa::kScalar);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_isa("avx-2", &note), fastest);
  EXPECT_NE(note.find("SPECSTACK_QUANT_ISA=avx-2 ignored: expected"), std::string::npos) << note;
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (quant_isa_available(isa)) {
      EXPECT_EQ(choose_quant_isa(isa_name(isa), &note), isa);
      EXPECT_TRUE(note.empty()) << note;
    } else {
      EXPECT_EQ(choose_quant_isa(isa_name(isa), &note), fastest);
      EXPECT_NE(note.find("lacks it"), std::string::npos) << note;
    }
  }
  if (std::getenv(kQuantIsaEnv) == nullptr) {
    EXPECT_EQ(quant_best_isa(), fastest);
  }
}

// The vendor check behind AVX2's default rows per pass agrees with the
// kernel's /proc/cpuinfo (Linux; x86 builds only).
TEST(QuantIsa, VendorMatchesProcCpuinfo) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, vendor;
  while (vendor.empty() && std::getline(cpuinfo, line)) {
    if (line.rfind("vendor_id", 0) == 0) vendor = line.substr(line.find(':') + 2);
  }
  if (vendor.empty() || !quant_isa_available(Isa::kAvx2)) GTEST_SKIP() << "no x86 vendor_id";
  EXPECT_EQ(quant_cpu_is_intel(), vendor == "GenuineIntel") << vendor;
}

// SPECSTACK_QUANT_ROWS: unset or empty 4, "1" and "4" as named, anything
// else 4 with a note naming the value.
TEST(QuantIsa, RowsPerPassFollowsTheVariable) {
  for (bool intel : {false, true}) {
    EXPECT_EQ(default_quant_rows(Isa::kAvx512Vnni, intel), 4);
    EXPECT_EQ(default_quant_rows(Isa::kAvxVnni, intel), 4);
    EXPECT_EQ(default_quant_rows(Isa::kScalar, intel), 1);
  }
  EXPECT_EQ(default_quant_rows(Isa::kAvx2, true), 4);
  EXPECT_EQ(default_quant_rows(Isa::kAvx2, false), 1);
  std::string note = "stale";
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    const int fallback = default_quant_rows(isa, quant_cpu_is_intel());
    EXPECT_EQ(choose_quant_rows(nullptr, isa, &note), fallback);
    EXPECT_TRUE(note.empty());
    EXPECT_EQ(choose_quant_rows("", isa, &note), fallback);
    EXPECT_EQ(choose_quant_rows("1", isa, &note), 1);
    EXPECT_TRUE(note.empty());
    EXPECT_EQ(choose_quant_rows("4", isa, &note), 4);
    for (const char* bad : {"2", "8", "one", "1 ", "04"}) {
      EXPECT_EQ(choose_quant_rows(bad, isa, &note), fallback) << bad;
      EXPECT_NE(note.find(std::string("SPECSTACK_QUANT_ROWS=") + bad +
                          " ignored: expected 1 or 4; using " + std::to_string(fallback)),
                std::string::npos)
          << note;
    }
  }
  if (std::getenv(kQuantRowsEnv) == nullptr) {
    EXPECT_EQ(quant_rows_per_pass(), default_quant_rows(quant_best_isa(), quant_cpu_is_intel()));
  }
}

}  // namespace
}  // namespace specstack::cpu

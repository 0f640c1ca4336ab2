// The fused gate/up + SwiGLU kernel (cuda/swiglu_gemm.h) against a double
// CPU twin and against the path it replaces (a cuBLAS gate_up GEMM into bf16,
// then silu_mul): ragged row counts (TMA zero fill past the last row), several
// tiles of columns and of k, strided inputs, and rows past n left untouched.
#include "cuda/swiglu_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/elementwise.h"
#include "cuda/gemm.h"
#include "cuda/sm90a.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {
namespace {

// act[i, c] = bf16(silu(g) * u) with g, u the double dot products rounded to
// bf16 (what a bf16 GEMM output holds), silu in float as silu_mul computes it.
std::vector<float> reference(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w,
                             int64_t n, int64_t width, int64_t in) {
  std::vector<float> act(size_t(n * width));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < width; ++c) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double xv = x[size_t(i * ldx + k)];
        g += xv * w[size_t(c * in + k)];
        u += xv * w[size_t((width + c) * in + k)];
      }
      const float gv = round_bf16(float(g)), uv = round_bf16(float(u));
      act[size_t(i * width + c)] = round_bf16(gv / (1.0f + std::exp(-gv)) * uv);
    }
  }
  return act;
}

// The worst |a - b| / (|b| / 64 + rms(b) / 100): a value may differ by a few
// bf16 steps of its own size (where the summation orders round g, u or the
// output differently), a small one by a hundredth of a typical value. Above 1
// is a wrong value, not a rounding.
double worst_error(const std::vector<float>& a, const std::vector<float>& b) {
  double rms = 0, worst = 0;
  for (float v : b) rms += double(v) * v;
  rms = std::sqrt(rms / double(b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / (std::abs(b[i]) / 64 + rms / 100));
  }
  return worst;
}

class SwigluGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SS_REQUIRE_GPU();
    if (!device_runs_sm90a()) GTEST_SKIP() << "the fused SwiGLU GEMM needs the sm_90a image";
  }
};

TEST_F(SwigluGemmTest, MatchesCpuTwinAndTheCublasPath) {
  std::mt19937 rng(11);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  Gemm gemm(stream);
  struct Shape {
    int64_t n, width, in, ldx;
  };
  // n: one row, one tile less a row, exactly one tile, ragged tiles; width:
  // one and three column tiles; in: one and several k stages, a strided x.
  for (const Shape& s : {Shape{1, 128, 64, 64}, Shape{127, 128, 192, 200}, Shape{128, 384, 64, 64},
                         Shape{300, 256, 896, 904}, Shape{1000, 384, 320, 320}}) {
    SCOPED_TRACE(::testing::Message()
                 << "n " << s.n << " width " << s.width << " in " << s.in << " ldx " << s.ldx);
    const auto x = random_values(rng, size_t(s.n * s.ldx));
    const auto w = random_values(rng, size_t(2 * s.width * s.in), -0.1f, 0.1f);
    auto dx = upload(to_bf16(x));
    auto dw = upload(to_bf16(w));
    // Two rows more than n, poisoned (0xFF bytes: NaN): the kernel must not touch them.
    DeviceBuffer<__nv_bfloat16> act(size_t((s.n + 2) * s.width));
    act.fill_bytes(0xFF);
    ASSERT_TRUE(swiglu_gemm_supported(dx.data(), s.ldx, dw.data(), s.n, s.width, s.in, act.data()));
    swiglu_gemm(dx.data(), s.ldx, dw.data(), s.n, s.width, s.in, act.data(), stream);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> all = to_f32(act.download());
    for (size_t i = size_t(s.n * s.width); i < all.size(); ++i) {
      ASSERT_TRUE(std::isnan(all[i])) << "a row past n was written at " << i;
    }
    const std::vector<float> got(all.begin(), all.begin() + s.n * s.width);
    const auto want = reference(x, s.ldx, w, s.n, s.width, s.in);
    EXPECT_LT(relative_error(got, want), 4e-3);
    EXPECT_LE(worst_error(got, want), 1.0);

    // The path it replaces: the bf16 gate_up GEMM, then silu_mul.
    DeviceBuffer<__nv_bfloat16> gate_up(size_t(s.n * 2 * s.width)),
        act_cublas(size_t(s.n * s.width));
    LinearWeight lw;
    lw.w16 = dw.data();
    gemm.linear(dx.data(), s.ldx, lw, s.n, 2 * s.width, s.in, gate_up.data(), 2 * s.width);
    silu_mul(gate_up.data(), int32_t(s.n), int32_t(s.width), act_cublas.data(), stream);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> cublas = to_f32(act_cublas.download());
    EXPECT_LT(relative_error(got, cublas), kBf16Tolerance);
    EXPECT_LE(worst_error(got, cublas), 1.0);
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Gemm::gate_up_silu takes the fused kernel from its row threshold on: the
// same SwiGLU as the cuBLAS + silu_mul path it takes below (and with the
// threshold off), within the bf16 rounding of differently ordered sums.
TEST_F(SwigluGemmTest, GemmTakesItFromTheRowThreshold) {
  std::mt19937 rng(5);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  const int64_t n = 300, width = 256, in = 128;
  const auto x = random_values(rng, size_t(n * in));
  const auto w = random_values(rng, size_t(2 * width * in), -0.2f, 0.2f);
  auto dx = upload(to_bf16(x));
  auto dw = upload(to_bf16(w));
  LinearWeight lw;
  lw.w16 = dw.data();
  DeviceBuffer<__nv_bfloat16> gate_up(size_t(n * 2 * width)), fused(size_t(n * width)),
      plain(size_t(n * width)), off(size_t(n * width));
  Gemm gemm(stream);
  // The default threshold (1024 rows) leaves 300 rows on cuBLAS + silu_mul.
  gemm.gate_up_silu(dx.data(), in, lw, n, width, in, gate_up.data(), plain.data());
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(gemm.swiglu_gemm_calls(), 0);
  // From 256 rows: the fused kernel, which never writes the gate_up scratch.
  gate_up.fill_bytes(0xFF);
  gemm.set_swiglu_min_rows(256);
  gemm.gate_up_silu(dx.data(), in, lw, n, width, in, gate_up.data(), fused.data());
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(gemm.swiglu_gemm_calls(), 1);
  const std::vector<float> scratch = to_f32(gate_up.download());
  EXPECT_TRUE(std::all_of(scratch.begin(), scratch.end(), [](float v) { return std::isnan(v); }));
  // Switched off: cuBLAS + silu_mul again, bit for bit the first product.
  gemm.set_swiglu_min_rows(0);
  gemm.gate_up_silu(dx.data(), in, lw, n, width, in, gate_up.data(), off.data());
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(gemm.swiglu_gemm_calls(), 1);
  const std::vector<float> a = to_f32(fused.download()), b = to_f32(plain.download());
  EXPECT_EQ(to_f32(off.download()), b);
  EXPECT_LT(relative_error(a, b), kBf16Tolerance);
  EXPECT_LE(worst_error(a, b), 1.0);
  EXPECT_LT(relative_error(a, reference(x, in, w, n, width, in)), 4e-3);
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(SwigluGemm, RefusesShapesItCannotTile) {
  // Checked before the device: false on any machine for these shapes.
  const auto* p = reinterpret_cast<const __nv_bfloat16*>(uintptr_t{256});
  auto* out = reinterpret_cast<__nv_bfloat16*>(uintptr_t{512});
  EXPECT_FALSE(swiglu_gemm_supported(p, 96, p, 10, 128, 96, out));  // in not a multiple of 64
  EXPECT_FALSE(swiglu_gemm_supported(p, 64, p, 10, 192, 64, out));  // width not a multiple of 128
  EXPECT_FALSE(swiglu_gemm_supported(p, 68, p, 10, 128, 64, out));  // ldx not a multiple of 8
  EXPECT_FALSE(swiglu_gemm_supported(p + 1, 64, p, 10, 128, 64, out));  // x not 16-byte aligned
  EXPECT_FALSE(swiglu_gemm_supported(p, 64, p, 0, 128, 64, out));       // no rows
}

}  // namespace
}  // namespace specstack::cuda::testing

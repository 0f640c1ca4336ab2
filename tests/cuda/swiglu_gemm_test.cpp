// The fused gate/up + SwiGLU kernel (cuda/swiglu_gemm.h) against a double
// CPU twin and against the path it replaces (a cuBLAS gate_up GEMM into bf16,
// then silu_mul; for e4m3 operands the cuBLASLt FP8 GEMM then the scaled
// SiLU): ragged row counts (TMA zero fill past the last row), several tiles of
// columns and of k, strided inputs, and rows past n left untouched.
#include "cuda/swiglu_gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/elementwise.h"
#include "cuda/gemm.h"
#include "cuda/sm90a.h"
#include "cuda_test_util.h"
#include "fp8_test_util.h"

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

// The e4m3 twin: g, u the exact sums of the e4m3 products rounded to bf16,
// then scaled (row scale, then column scale, in float) as scaled_silu_mul
// does, silu in float, the output rounded to bf16.
std::vector<float> fp8_reference(const DeviceFp8Weight& x, const DeviceFp8Weight& w, int64_t n,
                                 int64_t width, int64_t in) {
  std::vector<float> act(size_t(n * width));
  for (int64_t i = 0; i < n; ++i) {
    const float rs = x.scale_host[size_t(i)];
    for (int64_t c = 0; c < width; ++c) {
      double g = 0, u = 0;
      for (int64_t k = 0; k < in; ++k) {
        const double xv = x.q_host[size_t(i * in + k)];
        g += xv * w.q_host[size_t(c * in + k)];
        u += xv * w.q_host[size_t((width + c) * in + k)];
      }
      const float gv = round_bf16(float(g)) * rs * w.scale_host[size_t(c)];
      const float uv = round_bf16(float(u)) * rs * w.scale_host[size_t(width + c)];
      act[size_t(i * width + c)] = round_bf16(gv / (1.0f + std::exp(-gv)) * uv);
    }
  }
  return act;
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

// e4m3 operands: the twin, and the cuBLASLt FP8 GEMM into bf16 followed by
// scaled_silu_mul (the path the kernel replaces), on the same quantized rows.
TEST_F(SwigluGemmTest, Fp8MatchesCpuTwinAndTheCublasLtPath) {
  std::mt19937 rng(17);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    Gemm gemm(stream);
    gemm.set_swiglu_min_rows(0);  // gate_up_silu below: the cuBLASLt path
    gemm.reserve_fp8_activations(1100, 896);
    gemm.set_fp8_gemv_max_rows(0);
    struct Shape {
      int64_t n, width, in;
    };
    // 1100 x 1024: more tiles than the device runs at once (the persistent walk).
    for (const Shape& s : {Shape{1, 64, 128}, Shape{127, 128, 256}, Shape{128, 448, 128},
                           Shape{300, 256, 896}, Shape{1000, 384, 384}, Shape{1100, 1024, 128}}) {
      SCOPED_TRACE(::testing::Message() << "n " << s.n << " width " << s.width << " in " << s.in);
      const auto x16 = random_values(rng, size_t(s.n * s.in), -3.0f, 3.0f);
      const DeviceFp8Weight x = quantize_on_device(x16, s.n, s.in, stream);
      const DeviceFp8Weight w = quantize_on_device(
          random_values(rng, size_t(2 * s.width * s.in), -0.1f, 0.1f), 2 * s.width, s.in, stream);
      DeviceBuffer<__nv_bfloat16> act(size_t((s.n + 2) * s.width));
      act.fill_bytes(0xFF);
      ASSERT_TRUE(fp8_swiglu_gemm_supported(x.q.data(), w.q.data(), w.scale.data(), s.n, s.width,
                                            s.in, act.data()));
      fp8_swiglu_gemm(x.q.data(), x.scale.data(), w.q.data(), w.scale.data(), s.n, s.width, s.in,
                      act.data(), stream);
      SS_CUDA_CHECK(cudaStreamSynchronize(stream));
      const std::vector<float> all = to_f32(act.download());
      for (size_t i = size_t(s.n * s.width); i < all.size(); ++i) {
        ASSERT_TRUE(std::isnan(all[i])) << "a row past n was written at " << i;
      }
      const std::vector<float> got(all.begin(), all.begin() + s.n * s.width);
      const auto want = fp8_reference(x, w, s.n, s.width, s.in);
      EXPECT_LT(relative_error(got, want), 4e-3);
      EXPECT_LE(worst_error(got, want), 1.0);

      // The path it replaces: Gemm quantizes the bf16 rows the same way
      // (quantize_rows_fp8), then the cuBLASLt GEMM and the scaled SiLU.
      DeviceBuffer<__nv_bfloat16> gate_up(size_t(s.n * 2 * s.width)), act_lt(size_t(s.n * s.width));
      auto dx = upload(to_bf16(x16));
      const LinearWeight lw{nullptr, w.q.data(), w.scale.data()};
      gemm.gate_up_silu(dx.data(), s.in, lw, s.n, s.width, s.in, gate_up.data(), act_lt.data());
      SS_CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(gemm.swiglu_gemm_calls(), 0);
      const std::vector<float> lt = to_f32(act_lt.download());
      EXPECT_LT(relative_error(got, lt), kBf16Tolerance);
      EXPECT_LE(worst_error(got, lt), 1.0);
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Sums whose partial sums are far larger than the result: every gate row
// climbs to ~2056 over the first half of k = 4096 and comes back down to 8
// (+1.125 at one k of every 32, then -1), so a sum kept to Hopper's FP8 MMA
// precision (~14 bits: steps of 0.25 at 2048) loses the 0.125s and ends near
// 0. The kernel adds each 128-deep stage into an f32 sum and gets 8 exactly:
// act = silu(8) * 512, bf16.
TEST_F(SwigluGemmTest, Fp8SumsKeepF32Precision) {
  const int64_t n = 2, width = 64, in = 4096;
  auto e4m3 = [](float v) { return fp8(v); };
  std::vector<fp8> x(size_t(n * in), e4m3(1.0f)), w(size_t(2 * width * in));
  for (int64_t c = 0; c < width; ++c) {
    for (int64_t k = 0; k < in; ++k) {
      const float gate = k < in / 2 ? (k % 32 == c % 32 ? 1.125f : 1.0f) : -1.0f;
      w[size_t(c * in + k)] = e4m3(gate);
      w[size_t((width + c) * in + k)] = e4m3(0.125f);  // u = 512
    }
  }
  DeviceFp8Weight xm, wm;
  xm.q = upload(x);
  wm.q = upload(w);
  xm.scale = upload(std::vector<float>(size_t(n), 1.0f));
  wm.scale = upload(std::vector<float>(size_t(2 * width), 1.0f));
  DeviceBuffer<__nv_bfloat16> act(size_t(n * width));
  fp8_swiglu_gemm(xm.q.data(), xm.scale.data(), wm.q.data(), wm.scale.data(), n, width, in,
                  act.data(), nullptr);
  SS_CUDA_CHECK(cudaDeviceSynchronize());
  const float want = round_bf16(8.0f / (1.0f + std::exp(-8.0f)) * 512.0f);
  for (float v : to_f32(act.download())) EXPECT_EQ(v, want);
}

// Gemm with e4m3 weights: from the row threshold on, gate_up_silu and the
// whole FP8 MLP take the fused kernel (the gate_up scratch never written)
// and agree with the cuBLASLt path they take below it and with it off.
TEST_F(SwigluGemmTest, Fp8GemmTakesItFromTheRowThreshold) {
  std::mt19937 rng(23);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  {
    const int64_t n = 300, width = 256, hidden = 256;
    Gemm gemm(stream);
    gemm.set_fp8_swiglu(true);
    gemm.reserve_fp8_activations(n, width);
    const DeviceFp8Weight gu = quantize_on_device(
        random_values(rng, size_t(2 * width * hidden), -0.2f, 0.2f), 2 * width, hidden, stream);
    const DeviceFp8Weight down = quantize_on_device(
        random_values(rng, size_t(hidden * width), -0.2f, 0.2f), hidden, width, stream);
    const LinearWeight w_gu{nullptr, gu.q.data(), gu.scale.data()};
    const LinearWeight w_down{nullptr, down.q.data(), down.scale.data()};
    auto dx = upload(to_bf16(random_values(rng, size_t(n * hidden), -2.0f, 2.0f)));
    DeviceBuffer<__nv_bfloat16> gate_up(size_t(n * 2 * width)), act(size_t(n * width)),
        y(size_t(n * hidden));
    // act and y of: the default threshold (1024 rows: cuBLASLt), 256 rows
    // (fused), off (cuBLASLt again).
    std::vector<float> acts[3], ys[3];
    const int64_t thresholds[3] = {-1, 256, 0};
    for (int v = 0; v < 3; ++v) {
      if (thresholds[v] >= 0) gemm.set_swiglu_min_rows(thresholds[v]);
      const int64_t calls = gemm.swiglu_gemm_calls();
      EXPECT_EQ(gemm.gate_up_fused(dx.data(), hidden, w_gu, n, width, hidden, act.data()), v == 1);
      EXPECT_EQ(gemm.gate_up_scratch_rows(w_gu, n, width, hidden), v == 1 ? 255 : n);
      gate_up.fill_bytes(0xFF);
      gemm.gate_up_silu(dx.data(), hidden, w_gu, n, width, hidden, gate_up.data(), act.data());
      SS_CUDA_CHECK(cudaStreamSynchronize(stream));
      acts[v] = to_f32(act.download());
      if (v == 1) {
        const std::vector<float> scratch = to_f32(gate_up.download());
        EXPECT_TRUE(
            std::all_of(scratch.begin(), scratch.end(), [](float f) { return std::isnan(f); }));
      }
      gate_up.fill_bytes(0xFF);
      gemm.mlp(dx.data(), hidden, w_gu, w_down, n, width, hidden, gate_up.data(), act.data(),
               y.data(), hidden);
      SS_CUDA_CHECK(cudaStreamSynchronize(stream));
      ys[v] = to_f32(y.download());
      EXPECT_EQ(gemm.swiglu_gemm_calls() - calls, v == 1 ? 2 : 0);
      if (v == 1) {
        const std::vector<float> scratch = to_f32(gate_up.download());
        EXPECT_TRUE(
            std::all_of(scratch.begin(), scratch.end(), [](float f) { return std::isnan(f); }));
      }
    }
    EXPECT_EQ(acts[2], acts[0]);  // off: the cuBLASLt path bit for bit
    EXPECT_EQ(ys[2], ys[0]);
    EXPECT_LT(relative_error(acts[1], acts[0]), kBf16Tolerance);
    EXPECT_LE(worst_error(acts[1], acts[0]), 1.0);
    // The down GEMM's e4m3 input comes from acts a bf16 rounding apart here
    // and there, which can tip an e4m3 rounding: a few e4m3 steps apart at most.
    EXPECT_LT(relative_error(ys[1], ys[0]), 2e-2);
  }
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
  const auto* q = reinterpret_cast<const fp8*>(uintptr_t{256});
  const auto* scale = reinterpret_cast<const float*>(uintptr_t{1024});
  EXPECT_FALSE(
      fp8_swiglu_gemm_supported(q, q, scale, 10, 128, 64, out));  // in not a multiple of 128
  EXPECT_FALSE(fp8_swiglu_gemm_supported(q, q, scale, 10, 96, 128, out));       // width not of 64
  EXPECT_FALSE(fp8_swiglu_gemm_supported(q, q, scale + 1, 10, 128, 128, out));  // scales at 4 bytes
  EXPECT_FALSE(fp8_swiglu_gemm_supported(q + 8, q, scale, 10, 128, 128, out));  // x at 8 bytes
}

}  // namespace
}  // namespace specstack::cuda::testing

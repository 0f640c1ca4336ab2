// skinny_gemm (9..128 rows, small weights) against a double-precision CPU
// twin, across row counts (all four tile sizes), bias / SiLU / f32 outputs; its batch
// invariance at the 0.5B draft's shapes; and Gemm's routing to it.
#include "cuda/skinny_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda/gemm.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {
namespace {

// y[i, r] = sum_k x[i, k] * w[r, k] (+ bias[r]) in double; with silu, w has
// 2 * out rows and y[i, r] = silu(gate) * up.
std::vector<float> reference(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w,
                             int64_t n, int64_t out, int64_t in, const std::vector<float>* bias,
                             bool silu) {
  auto dot = [&](int64_t i, int64_t r) {
    double s = 0;
    for (int64_t k = 0; k < in; ++k) s += double(x[size_t(i * ldx + k)]) * w[size_t(r * in + k)];
    return s;
  };
  std::vector<float> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < out; ++r) {
      double v = 0;
      if (silu) {
        const double gate = dot(i, r), up = dot(i, out + r);
        v = gate / (1.0 + std::exp(-gate)) * up;
      } else {
        v = dot(i, r) + (bias != nullptr ? (*bias)[size_t(r)] : 0.0);
      }
      y[size_t(i * out + r)] = float(v);
    }
  }
  return y;
}

TEST(CudaSkinnyGemm, MatchesCpuTwinForRowCountsAndEpilogues) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(23);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  struct Case {
    int64_t out, in;
    bool silu, bias, f32;
  };
  // out not a multiple of the 16-row tile; in from fewer 32-wide chunks than
  // warps to many; n through all four tile sizes.
  for (const Case& c : {Case{200, 128, false, true, false}, Case{72, 640, false, false, true},
                        Case{90, 96, true, false, false}, Case{40, 1056, true, false, false}}) {
    for (int64_t n : {9, 16, 33, 64, 65, 89, 97, 128}) {
      {
        SCOPED_TRACE(::testing::Message()
                     << "out " << c.out << " in " << c.in << " silu " << c.silu << " n " << n);
        const int64_t ldx = c.in + 8;  // a strided input
        const int64_t w_rows = c.silu ? 2 * c.out : c.out;
        auto x = random_values(rng, size_t(n * ldx));
        auto w = random_values(rng, size_t(w_rows * c.in));
        auto bias = random_values(rng, size_t(c.out));
        auto d_x = upload(to_bf16(x));
        auto d_w = upload(to_bf16(w));
        auto d_bias = upload(bias);
        ASSERT_TRUE(skinny_gemm_supported(d_x.data(), ldx, d_w.data(), n, c.out, c.in, c.silu));
        const auto want = reference(x, ldx, w, n, c.out, c.in, c.bias ? &bias : nullptr, c.silu);
        const float* b = c.bias ? d_bias.data() : nullptr;
        DeviceBuffer<float> y32(size_t(n * c.out));
        DeviceBuffer<__nv_bfloat16> y16(size_t(n * c.out)), again(size_t(n * c.out));
        y32.fill_bytes(0xFF);
        y16.fill_bytes(0xFF);
        again.fill_bytes(0xFF);
        if (c.f32) {
          skinny_gemm(d_x.data(), ldx, d_w.data(), n, c.out, c.in, nullptr, y32.data(), c.out, b,
                      false, stream);
        }
        skinny_gemm(d_x.data(), ldx, d_w.data(), n, c.out, c.in, y16.data(), nullptr, c.out, b,
                    c.silu, stream);
        // Deterministic: a second launch gives the same bits.
        skinny_gemm(d_x.data(), ldx, d_w.data(), n, c.out, c.in, again.data(), nullptr, c.out, b,
                    c.silu, stream);
        SS_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (c.f32) {
          EXPECT_LE(relative_error(y32.download(), want), 1e-5);  // fp32 accumulation
        }
        const auto got = to_f32(y16.download());
        EXPECT_LE(relative_error(got, want), 4e-3);  // one bf16 rounding
        EXPECT_EQ(relative_error(to_f32(again.download()), got), 0.0);
      }
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The 0.5B draft's projections (qkv, o, gate_up + SiLU, down): the first 9
// rows come out bit-identical from a 9-row launch and from 64-, 89- and
// 128-row ones (other tile sizes).
TEST(CudaSkinnyGemm, RowsDoNotDependOnTheRowCount) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(29);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  struct Shape {
    int64_t out, in;
    bool silu;
  };
  for (const Shape& s : {Shape{1152, 896, false}, Shape{896, 896, false}, Shape{4864, 896, true},
                         Shape{896, 4864, false}}) {
    SCOPED_TRACE(::testing::Message() << "out " << s.out << " in " << s.in);
    const int64_t w_rows = s.silu ? 2 * s.out : s.out;
    auto d_x = upload(to_bf16(random_values(rng, size_t(128 * s.in))));
    auto d_w = upload(to_bf16(random_values(rng, size_t(w_rows * s.in), -0.05f, 0.05f)));
    auto run = [&](int64_t n) {
      DeviceBuffer<__nv_bfloat16> y(size_t(n * s.out));
      skinny_gemm(d_x.data(), s.in, d_w.data(), n, s.out, s.in, y.data(), nullptr, s.out, nullptr,
                  s.silu, stream);
      SS_CUDA_CHECK(cudaStreamSynchronize(stream));
      auto host = to_f32(y.download());
      host.resize(size_t(kSkinnyMinRows * s.out));
      return host;
    };
    const auto nine = run(kSkinnyMinRows);
    EXPECT_EQ(relative_error(run(64), nine), 0.0);
    EXPECT_EQ(relative_error(run(89), nine), 0.0);
    EXPECT_EQ(relative_error(run(128), nine), 0.0);
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// Gemm routes 9..128 rows against a small weight to skinny_gemm (bias in its
// epilogue, so fuses_bias), and bigger weights or more rows to cuBLAS.
TEST(CudaSkinnyGemm, GemmRoutesSmallWeightsAndAgreesWithCublas) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(31);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  Gemm gemm(stream);
  const int64_t in = 512, out = 300;
  auto x = random_values(rng, size_t(160 * in));
  auto w = random_values(rng, size_t(out * in));
  auto bias = random_values(rng, size_t(out));
  auto d_x = upload(to_bf16(x));
  auto d_w = upload(to_bf16(w));
  auto d_bias = upload(bias);
  const LinearWeight lw{d_w.data(), nullptr, nullptr};
  EXPECT_TRUE(Gemm::fuses_bias(d_x.data(), in, lw, 64, out, in));
  EXPECT_FALSE(Gemm::fuses_bias(d_x.data(), in, lw, 129, out, in));
  EXPECT_FALSE(skinny_gemm_supported(d_x.data(), in, d_w.data(), 64, 4096, 4096, false));
  DeviceBuffer<__nv_bfloat16> via_gemm(size_t(64 * out)), direct(size_t(64 * out));
  DeviceBuffer<__nv_bfloat16> cublas(size_t(160 * out));
  gemm.linear(d_x.data(), in, lw, 64, out, in, via_gemm.data(), out, d_bias.data());
  skinny_gemm(d_x.data(), in, d_w.data(), 64, out, in, direct.data(), nullptr, out, d_bias.data(),
              false, stream);
  gemm.linear(d_x.data(), in, lw, 160, out, in, cublas.data(), out, d_bias.data());  // cuBLAS
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto got = to_f32(via_gemm.download());
  EXPECT_EQ(relative_error(got, to_f32(direct.download())), 0.0);
  auto c = to_f32(cublas.download());
  c.resize(got.size());
  EXPECT_LE(relative_error(got, c), 4e-3);
  EXPECT_LE(relative_error(got, reference(x, in, w, 64, out, in, &bias, false)), 4e-3);
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

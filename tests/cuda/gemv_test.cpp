// The decode GEMV against a double-precision CPU twin and against cuBLAS
// (Gemm::linear with n above kGemvMaxRows takes the cuBLAS path).
#include "cuda/gemv.h"

#include <gtest/gtest.h>

#include <random>

#include "cuda/gemm.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {
namespace {

// y[i, r] = sum_k x[i, k] * w[r, k] in double.
std::vector<float> reference(const std::vector<float>& x, int64_t ldx, const std::vector<float>& w,
                             int64_t n, int64_t out, int64_t in) {
  std::vector<float> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < out; ++r) {
      double s = 0;
      for (int64_t k = 0; k < in; ++k) s += double(x[size_t(i * ldx + k)]) * w[size_t(r * in + k)];
      y[size_t(i * out + r)] = float(s);
    }
  }
  return y;
}

TEST(CudaGemv, MatchesCpuTwinForEveryRowCountAndBothOutputs) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(7);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  for (int64_t in : {8, 96, 1000, 3584}) {
    for (int64_t out : {1, 7, 513}) {
      for (int64_t n = 1; n <= kGemvMaxRows; ++n) {
        SCOPED_TRACE(::testing::Message() << "in " << in << " out " << out << " n " << n);
        const int64_t ldx = in + 8;  // a strided input, like a row of a wider buffer
        auto x = random_values(rng, size_t(n * ldx));
        auto w = random_values(rng, size_t(out * in));
        auto d_x = upload(to_bf16(x));
        auto d_w = upload(to_bf16(w));
        ASSERT_TRUE(gemv_supported(d_x.data(), ldx, d_w.data(), n, in));
        const auto want = reference(x, ldx, w, n, out, in);
        DeviceBuffer<float> y32(size_t(n * out));
        y32.fill_bytes(0xFF);
        gemv(d_x.data(), ldx, d_w.data(), n, out, in, nullptr, y32.data(), out, stream);
        DeviceBuffer<__nv_bfloat16> y16(size_t(n * out));
        y16.fill_bytes(0xFF);
        gemv(d_x.data(), ldx, d_w.data(), n, out, in, y16.data(), nullptr, out, stream);
        SS_CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_LE(relative_error(y32.download(), want), 1e-5);  // fp32 accumulation
        EXPECT_LE(relative_error(to_f32(y16.download()), want), kBf16Tolerance);
      }
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(CudaGemv, LinearAgreesAcrossTheGemvAndCublasPaths) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(11);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  Gemm gemm(stream);
  const int64_t n = 16, in = 512, out = 300;
  auto x = random_values(rng, size_t(n * in));
  auto w = random_values(rng, size_t(out * in));
  auto d_x = upload(to_bf16(x));
  auto d_w = upload(to_bf16(w));
  DeviceBuffer<float> all(size_t(n * out)), first(size_t(kGemvMaxRows * out));
  all.fill_bytes(0xFF);
  first.fill_bytes(0xFF);
  gemm.linear_f32(d_x.data(), in, d_w.data(), n, out, in, all.data(), out);               // cuBLAS
  gemm.linear_f32(d_x.data(), in, d_w.data(), kGemvMaxRows, out, in, first.data(), out);  // gemv
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  auto a = all.download();
  a.resize(size_t(kGemvMaxRows * out));
  EXPECT_LE(relative_error(first.download(), a), 1e-5);
  EXPECT_LE(relative_error(a, reference(x, in, w, kGemvMaxRows, out, in)), 1e-5);
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

// The bf16 GEMM's per-shape algorithm choice (cuda/bf16_gemm_tuner.h):
// whatever it picks for a verify-sized row count, the product is the
// double-precision one within bf16 rounding; another row count of the same
// bucket reuses the choice; a graph capture of an untuned bucket times
// nothing and still computes the product; prefill-sized row counts are left
// to cublasGemmEx untuned.
TEST(CudaGemm, TunedAlgorithmsComputeTheSameProduct) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(13);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  Gemm gemm(stream);
  const int64_t in = 1024, out = 768, ldx = in + 8;
  auto w = random_values(rng, size_t(out * in));
  auto d_w = upload(to_bf16(w));
  auto check = [&](int64_t n) {
    SCOPED_TRACE(::testing::Message() << "rows " << n);
    auto x = random_values(rng, size_t(n * ldx));
    auto d_x = upload(to_bf16(x));
    DeviceBuffer<__nv_bfloat16> y(size_t(n * out));
    y.fill_bytes(0xFF);
    gemm.linear(d_x.data(), ldx, LinearWeight{d_w.data()}, n, out, in, y.data(), out);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_LE(relative_error(to_f32(y.download()), reference(x, ldx, w, n, out, in)),
              kBf16Tolerance);
  };
  check(320);  // tunes the bucket (257..512)
  EXPECT_EQ(gemm.bf16_tuner().tuned(), 1);
  check(300);  // the same bucket: no new tuning
  EXPECT_EQ(gemm.bf16_tuner().tuned(), 1);
  check(4096);  // past max_rows: cublasGemmEx untimed
  EXPECT_EQ(gemm.bf16_tuner().tuned(), 1);

  // Inside a capture the untuned bucket 65..128 runs the default.
  const int64_t n = 100;
  auto x = random_values(rng, size_t(n * ldx));
  auto d_x = upload(to_bf16(x));
  DeviceBuffer<__nv_bfloat16> y(size_t(n * out));
  y.fill_bytes(0xFF);
  cudaGraph_t graph = nullptr;
  SS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gemm.linear(d_x.data(), ldx, LinearWeight{d_w.data()}, n, out, in, y.data(), out);
  SS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  SS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  SS_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(gemm.bf16_tuner().tuned(), 1);
  EXPECT_LE(relative_error(to_f32(y.download()), reference(x, ldx, w, n, out, in)), kBf16Tolerance);
  SS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SS_CUDA_CHECK(cudaGraphDestroy(graph));
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

namespace specstack::cuda::testing {
namespace {

// The fused epilogues: bias, and the MLP's gate/up + SiLU.
TEST(CudaGemv, BiasAndSiluEpiloguesMatchCpuTwin) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(13);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  for (int64_t n : {1, 3, 8}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    const int64_t in = 264, width = 97;
    auto x = random_values(rng, size_t(n * in));
    auto w = random_values(rng, size_t(2 * width * in));
    auto bias = random_values(rng, size_t(2 * width));
    auto d_x = upload(to_bf16(x));
    auto d_w = upload(to_bf16(w));
    auto d_bias = upload(bias);
    const auto dots = reference(x, in, w, n, 2 * width, in);  // [n, 2 * width]
    std::vector<float> want_bias(dots.size()), want_silu(size_t(n * width));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < 2 * width; ++r) {
        want_bias[size_t(i * 2 * width + r)] = dots[size_t(i * 2 * width + r)] + bias[size_t(r)];
      }
      for (int64_t r = 0; r < width; ++r) {
        const double g = dots[size_t(i * 2 * width + r)],
                     u = dots[size_t(i * 2 * width + width + r)];
        want_silu[size_t(i * width + r)] = float(g / (1.0 + std::exp(-g)) * u);
      }
    }
    DeviceBuffer<float> y(size_t(n * 2 * width));
    y.fill_bytes(0xFF);
    gemv(d_x.data(), in, d_w.data(), n, 2 * width, in, nullptr, y.data(), 2 * width, stream,
         d_bias.data());
    DeviceBuffer<__nv_bfloat16> act(size_t(n * width));
    act.fill_bytes(0xFF);
    gemv_silu_mul(d_x.data(), in, d_w.data(), n, width, in, act.data(), stream);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_LE(relative_error(y.download(), want_bias), 1e-5);
    EXPECT_LE(relative_error(to_f32(act.download()), want_silu), kBf16Tolerance);
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

namespace specstack::cuda::testing {
namespace {

// The 2..8-row (tensor-core) path: a row's result must not depend on how
// many other rows share the step (a speculative verify row against the same
// row in a smaller step), bit for bit; and a long reduction of the 7B's
// down-projection width matches the double twin.
TEST(CudaGemv, MultiRowResultsDoNotDependOnTheRowCount) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(17);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  const int64_t in = 18944, out = 80;  // 5 row tiles, 592 32-element chunks
  auto x = random_values(rng, size_t(kGemvMaxRows * in));
  auto w = random_values(rng, size_t(out * in));
  auto d_x = upload(to_bf16(x));
  auto d_w = upload(to_bf16(w));
  const auto want = reference(x, in, w, kGemvMaxRows, out, in);
  DeviceBuffer<float> all(size_t(kGemvMaxRows * out));
  all.fill_bytes(0xFF);
  gemv(d_x.data(), in, d_w.data(), kGemvMaxRows, out, in, nullptr, all.data(), out, stream);
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto all_host = all.download();
  EXPECT_LE(relative_error(all_host, want), 1e-5);
  for (int64_t n = 2; n < kGemvMaxRows; ++n) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    DeviceBuffer<float> some(size_t(n * out));
    some.fill_bytes(0xFF);
    gemv(d_x.data(), in, d_w.data(), n, out, in, nullptr, some.data(), out, stream);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    const auto got = some.download();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], all_host[i]) << "element " << i;
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

namespace specstack::cuda::testing {
namespace {

// The one-row kernel with 1, 2 and 4 warps per output row (the split gemv
// picks for long rows), plain, with bias and f32 output, and gate/up + SiLU;
// row counts that leave a block partly empty.
TEST(CudaGemv, OneRowSplitsMatchCpuTwin) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(19);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  for (int64_t in : {24, 1000, 4864}) {
    for (int64_t out : {1, 3, 130}) {
      auto x = random_values(rng, size_t(in));
      auto w = random_values(rng, size_t(2 * out * in));
      auto bias = random_values(rng, size_t(out));
      auto d_x = upload(to_bf16(x));
      auto d_w = upload(to_bf16(w));
      auto d_bias = upload(bias);
      const auto dots = reference(x, in, w, 1, 2 * out, in);  // [1, 2 * out]
      std::vector<float> want_bias(static_cast<size_t>(out)), want_silu(static_cast<size_t>(out));
      for (int64_t r = 0; r < out; ++r) {
        want_bias[size_t(r)] = dots[size_t(r)] + bias[size_t(r)];
        const double g = dots[size_t(r)], u = dots[size_t(out + r)];
        want_silu[size_t(r)] = float(g / (1.0 + std::exp(-g)) * u);
      }
      for (int split : {1, 2, 4}) {
        SCOPED_TRACE(::testing::Message() << "in " << in << " out " << out << " split " << split);
        DeviceBuffer<float> y(static_cast<size_t>(out));
        y.fill_bytes(0xFF);
        gemv_one_row(d_x.data(), d_w.data(), out, in, nullptr, y.data(), d_bias.data(), false,
                     split, stream);
        DeviceBuffer<__nv_bfloat16> act(static_cast<size_t>(out));
        act.fill_bytes(0xFF);
        gemv_one_row(d_x.data(), d_w.data(), out, in, act.data(), nullptr, nullptr, true, split,
                     stream);
        SS_CUDA_CHECK(cudaStreamSynchronize(stream));
        EXPECT_LE(relative_error(y.download(), want_bias), 1e-5);
        EXPECT_LE(relative_error(to_f32(act.download()), want_silu), kBf16Tolerance);
      }
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

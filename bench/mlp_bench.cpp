// mlp_bench: the MLP of a prefill chunk (random operands; qwen2.5-7b, or
// qwen2.5-0.5b with --draft) as the model runs it and as it could:
//  * serial: cuBLAS gate_up GEMM, silu_mul, cuBLAS down GEMM on one stream;
//  * swiglu: the fused gate/up + SwiGLU kernel (cuda/swiglu_gemm.h), then down;
//    and the gate/up part alone both ways;
//  * C chunks, two streams: silu_mul + down of chunk c on a second stream beside
//    chunk c + 1's gate_up GEMM (does a memory-bound pass hide behind a GEMM?),
//    and the same chunks on one stream (what the cut alone costs).
//  * --fp8: the --quantization fp8 MLP as Gemm::mlp runs it on e4m3 rows, with
//    the fused SwiGLU kernel (then a quantize pass) and with the cuBLASLt FP8
//    GEMM into the [n, 2 I] bf16 product + silu_mul_quantize_fp8, and the
//    fused kernel alone.
// Times: CUDA events, median of 5 batches of 10 calls after warm-up.
//   build/bench/mlp_bench [--rows 2048,8192,16384] [--chunks 2,4] [--draft] [--fp8]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/elementwise.h"
#include "cuda/fp8_quantize.h"
#include "cuda/gemm.h"
#include "cuda/swiglu_gemm.h"

using namespace specstack::cuda;

namespace {

// y[n, out] = x[n, in] W^T, bf16 in and out, f32 accumulate (as cuda/gemm.cpp).
void linear(cublasHandle_t blas, const bf16* x, const bf16* w, bf16* y, int64_t n, int64_t out,
            int64_t in) {
  const float alpha = 1.0f, beta = 0.0f;
  SS_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(n), int(in), &alpha, w,
                               CUDA_R_16BF, int(in), x, CUDA_R_16BF, int(in), &beta, y, CUDA_R_16BF,
                               int(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

template <typename Run>
double median_ms(Run run, cudaStream_t stream) {
  for (int i = 0; i < 3; ++i) run();
  cudaEvent_t a, b;
  SS_CUDA_CHECK(cudaEventCreate(&a));
  SS_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int batch = 0; batch < 5; ++batch) {
    SS_CUDA_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < 10; ++i) run();
    SS_CUDA_CHECK(cudaEventRecord(b, stream));
    SS_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    SS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / 10.0);
  }
  SS_CUDA_CHECK(cudaEventDestroy(a));
  SS_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// The FP8 MLP (qwen2.5 shapes, weights quantized per output row, rows per
// token) through Gemm::mlp with the fused SwiGLU kernel and without.
void run_fp8(const std::vector<int64_t>& rows_list, int64_t hidden, int64_t inter,
             const DeviceBuffer<bf16>& x, const DeviceBuffer<bf16>& w_gu,
             const DeviceBuffer<bf16>& w_down, DeviceBuffer<bf16>& gu, DeviceBuffer<bf16>& act,
             DeviceBuffer<bf16>& y, cudaStream_t stream) {
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());
  Gemm gemm(stream);
  gemm.set_fp8_swiglu(true);  // the row threshold below decides
  gemm.reserve_fp8_activations(max_rows, inter);
  DeviceBuffer<fp8> gu8(w_gu.size()), down8(w_down.size()), x8(size_t(max_rows * hidden));
  DeviceBuffer<float> gu_scale(size_t(2 * inter)), down_scale(static_cast<size_t>(hidden)),
      x_scale(static_cast<size_t>(max_rows));
  quantize_rows_fp8(w_gu.data(), hidden, 2 * inter, hidden, gu8.data(), gu_scale.data(), stream,
                    false);
  quantize_rows_fp8(w_down.data(), inter, hidden, inter, down8.data(), down_scale.data(), stream,
                    false);
  quantize_rows_fp8(x.data(), hidden, max_rows, hidden, x8.data(), x_scale.data(), stream, false);
  const LinearWeight lw_gu{nullptr, gu8.data(), gu_scale.data()};
  const LinearWeight lw_down{nullptr, down8.data(), down_scale.data()};
  const Fp8Rows rows{x8.data(), x_scale.data()};
  std::printf("| rows | FP8 MLP | ms per MLP | vs cuBLASLt path |\n|---|---|---|---|\n");
  for (int64_t n : rows_list) {
    auto mlp = [&] {
      gemm.mlp(rows, lw_gu, lw_down, n, inter, hidden, gu.data(), act.data(), y.data(), hidden);
    };
    gemm.set_swiglu_min_rows(0);
    const double t_lt = median_ms(mlp, stream);
    std::printf("| %lld | cuBLASLt gate_up + silu_mul_quantize + down | %.3f | 1.000 |\n",
                static_cast<long long>(n), t_lt);
    if (!fp8_swiglu_gemm_supported(x8.data(), gu8.data(), gu_scale.data(), n, inter, hidden,
                                   act.data())) {
      continue;
    }
    gemm.set_swiglu_min_rows(1);
    const double t_fused = median_ms(mlp, stream);
    std::printf("| %lld | swiglu kernel + quantize + down | %.3f | %.3f |\n",
                static_cast<long long>(n), t_fused, t_fused / t_lt);
    const double t_kernel = median_ms(
        [&] {
          fp8_swiglu_gemm(x8.data(), x_scale.data(), gu8.data(), gu_scale.data(), n, inter, hidden,
                          act.data(), stream);
        },
        stream);
    const double flop = 2.0 * double(n) * 2 * inter * hidden;
    std::printf("| %lld | the fused kernel alone (%.0f TFLOP/s) | %.3f | |\n",
                static_cast<long long>(n), flop / t_kernel / 1e9, t_kernel);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"a prefill MLP: cuBLAS + silu_mul, the fused SwiGLU kernel, two streams"};
  std::vector<int64_t> rows_list = {2048, 8192, 16384};
  std::vector<int> chunk_list = {2, 4};
  app.add_option("--rows", rows_list, "rows (tokens)")->delimiter(',');
  app.add_option("--chunks", chunk_list, "row chunks of the two-stream schedule")->delimiter(',');
  bool draft = false;
  app.add_flag("--draft", draft, "qwen2.5-0.5b's MLP (hidden 896, intermediate 4864)");
  bool fp8_mlp = false;
  app.add_flag("--fp8", fp8_mlp, "the --quantization fp8 MLP instead (e4m3 weights and rows)");
  CLI11_PARSE(app, argc, argv);
  // qwen2.5-7b's MLP, or qwen2.5-0.5b's with --draft.
  const int64_t kHidden = draft ? 896 : 3584, kInter = draft ? 4864 : 18944;
  const int64_t max_rows = *std::max_element(rows_list.begin(), rows_list.end());

  cudaStream_t s0, s1;
  SS_CUDA_CHECK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  SS_CUDA_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cublasHandle_t b0, b1;
  SS_CUBLAS_CHECK(cublasCreate(&b0));
  SS_CUBLAS_CHECK(cublasCreate(&b1));
  const size_t workspace_bytes = size_t{64} << 20;
  DeviceBuffer<char> ws0(workspace_bytes), ws1(workspace_bytes);
  SS_CUBLAS_CHECK(cublasSetStream(b0, s0));
  SS_CUBLAS_CHECK(cublasSetStream(b1, s1));
  SS_CUBLAS_CHECK(cublasSetWorkspace(b0, ws0.data(), workspace_bytes));
  SS_CUBLAS_CHECK(cublasSetWorkspace(b1, ws1.data(), workspace_bytes));

  DeviceBuffer<bf16> w_gu(size_t(2 * kInter * kHidden)), w_down(size_t(kHidden * kInter));
  DeviceBuffer<bf16> x(size_t(max_rows * kHidden)), gu(size_t(max_rows * 2 * kInter)),
      act(size_t(max_rows * kInter)), y(size_t(max_rows * kHidden));
  fill_dummy_bf16(w_gu.data(), int64_t(w_gu.size()), 1, 0.02f, s0);
  fill_dummy_bf16(w_down.data(), int64_t(w_down.size()), 2, 0.02f, s0);
  fill_dummy_bf16(x.data(), int64_t(x.size()), 3, 1.0f, s0);
  SS_CUDA_CHECK(cudaStreamSynchronize(s0));

  if (fp8_mlp) {
    run_fp8(rows_list, kHidden, kInter, x, w_gu, w_down, gu, act, y, s0);
    return 0;
  }

  std::vector<cudaEvent_t> ev(64);
  for (auto& e : ev) SS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  std::printf("| rows | schedule | ms per MLP | vs serial |\n|---|---|---|---|\n");
  for (int64_t n : rows_list) {
    auto serial = [&] {
      linear(b0, x.data(), w_gu.data(), gu.data(), n, 2 * kInter, kHidden);
      silu_mul(gu.data(), int32_t(n), int32_t(kInter), act.data(), s0);
      linear(b0, act.data(), w_down.data(), y.data(), n, kHidden, kInter);
    };
    const double t_serial = median_ms(serial, s0);
    std::printf("| %lld | serial | %.3f | 1.000 |\n", static_cast<long long>(n), t_serial);
    if (swiglu_gemm_supported(x.data(), kHidden, w_gu.data(), n, kInter, kHidden, act.data())) {
      auto fused = [&] {
        swiglu_gemm(x.data(), kHidden, w_gu.data(), n, kInter, kHidden, act.data(), s0);
        linear(b0, act.data(), w_down.data(), y.data(), n, kHidden, kInter);
      };
      const double t_fused = median_ms(fused, s0);
      std::printf("| %lld | swiglu kernel + down | %.3f | %.3f |\n", static_cast<long long>(n),
                  t_fused, t_fused / t_serial);
      auto gate_up_cublas = [&] {
        linear(b0, x.data(), w_gu.data(), gu.data(), n, 2 * kInter, kHidden);
        silu_mul(gu.data(), int32_t(n), int32_t(kInter), act.data(), s0);
      };
      auto gate_up_fused = [&] {
        swiglu_gemm(x.data(), kHidden, w_gu.data(), n, kInter, kHidden, act.data(), s0);
      };
      const double t_gc = median_ms(gate_up_cublas, s0);
      const double t_gf = median_ms(gate_up_fused, s0);
      const double flop = 2.0 * double(n) * 2 * kInter * kHidden;
      std::printf(
          "| %lld | gate_up: cuBLAS + silu_mul %.3f ms (%.0f TFLOP/s), swiglu kernel %.3f "
          "ms (%.0f TFLOP/s) | %.3f | %.3f |\n",
          static_cast<long long>(n), t_gc, flop / t_gc / 1e9, t_gf, flop / t_gf / 1e9, t_gf,
          t_gf / t_gc);
    }
    for (int chunks : chunk_list) {
      if (chunks < 2) continue;  // one chunk is the serial schedule
      const int64_t step = (n + chunks - 1) / chunks;
      auto overlapped = [&] {
        // s0: gate_up of every chunk; s1: silu_mul + down of chunk c once its
        // gate_up is done, beside chunk c + 1's gate_up.
        for (int c = 0; c < chunks; ++c) {
          const int64_t r0 = c * step, rows = std::min(step, n - r0);
          if (rows <= 0) break;
          linear(b0, x.data() + r0 * kHidden, w_gu.data(), gu.data() + r0 * 2 * kInter, rows,
                 2 * kInter, kHidden);
          SS_CUDA_CHECK(cudaEventRecord(ev[size_t(c)], s0));
          SS_CUDA_CHECK(cudaStreamWaitEvent(s1, ev[size_t(c)]));
          silu_mul(gu.data() + r0 * 2 * kInter, int32_t(rows), int32_t(kInter),
                   act.data() + r0 * kInter, s1);
          linear(b1, act.data() + r0 * kInter, w_down.data(), y.data() + r0 * kHidden, rows,
                 kHidden, kInter);
        }
        SS_CUDA_CHECK(cudaEventRecord(ev[63], s1));
        SS_CUDA_CHECK(cudaStreamWaitEvent(s0, ev[63]));
      };
      const double t = median_ms(overlapped, s0);
      std::printf("| %lld | %d chunks, two streams | %.3f | %.3f |\n", static_cast<long long>(n),
                  chunks, t, t / t_serial);
      // The same chunks on one stream: what the cut alone costs.
      auto chunked = [&] {
        for (int c = 0; c < chunks; ++c) {
          const int64_t r0 = c * step, rows = std::min(step, n - r0);
          if (rows <= 0) break;
          linear(b0, x.data() + r0 * kHidden, w_gu.data(), gu.data() + r0 * 2 * kInter, rows,
                 2 * kInter, kHidden);
          silu_mul(gu.data() + r0 * 2 * kInter, int32_t(rows), int32_t(kInter),
                   act.data() + r0 * kInter, s0);
          linear(b0, act.data() + r0 * kInter, w_down.data(), y.data() + r0 * kHidden, rows,
                 kHidden, kInter);
        }
      };
      const double tc = median_ms(chunked, s0);
      std::printf("| %lld | %d chunks, one stream | %.3f | %.3f |\n", static_cast<long long>(n),
                  chunks, tc, tc / t_serial);
    }
  }
  return 0;
}

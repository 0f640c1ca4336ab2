// gemm_algo_bench: bf16 linear layers y[n, out] = x[n, in] W^T at the shapes a
// decode / verify / prefill step of qwen2.5-7b runs (cuda/gemm.cpp issues them
// through cublasGemmEx with the default algorithm), timed for cublasGemmEx and
// for each of cuBLASLt's top heuristic algorithms (tile, stages, split-K as
// cuBLASLt reports them): what choosing the algorithm per shape could gain.
// CUDA events, median of 5 batches of 20 calls after 3 warm-up calls.
// --draft: qwen2.5-0.5b's shapes (the speculative draft, SpecPrefill's scorer).
// --random: operands drawn N(0, 0.02) (weights) / N(0, 1) (activations) instead of one
//   repeated small value: tensor cores draw more power on changing bits, and a GEMM
//   on real data may run at lower clocks than one on a constant.
//   build/bench/gemm_algo_bench [--rows 64,320,2048] [--candidates 16] [--draft] [--random]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_timing.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/lt_linear_layout.h"

using namespace specstack::cuda;

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};

template <typename Call>
double time_us(Call call) {
  return specstack::bench::median_us_per_call(call, 20, 5);
}

int attr_int(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t a) {
  int v = 0;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, a, &v, sizeof(v), &written);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bf16 GEMM algorithms at the qwen2.5-7b linear shapes"};
  std::vector<int64_t> rows_list = {64, 320, 2048};
  int candidates = 16;
  bool draft = false;
  bool random = false;
  app.add_option("--rows", rows_list, "rows (tokens) per GEMM")->delimiter(',');
  app.add_option("--candidates", candidates, "cuBLASLt heuristic algorithms to time");
  app.add_flag("--draft", draft, "qwen2.5-0.5b's shapes (the speculative draft) instead");
  app.add_flag("--random", random, "normal random operands instead of a constant");
  CLI11_PARSE(app, argc, argv);
  std::mt19937 rng(7);
  auto fill = [&](DeviceBuffer<__nv_bfloat16>& buffer, size_t count, float sd) {
    if (!random) return buffer.fill_bytes(0x3c);  // small finite bf16 values
    std::normal_distribution<float> normal(0.0f, sd);
    std::vector<__nv_bfloat16> host(count);
    for (auto& v : host) v = __float2bfloat16(normal(rng));
    buffer.upload(host);
  };

  const std::vector<Shape> shapes = draft ? std::vector<Shape>{{"qkv", 1152, 896},
                                                               {"o", 896, 896},
                                                               {"gate_up", 9728, 896},
                                                               {"down", 896, 4864}}
                                          : std::vector<Shape>{{"qkv", 4608, 3584},
                                                               {"o", 3584, 3584},
                                                               {"gate_up", 37888, 3584},
                                                               {"down", 3584, 18944}};
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  SS_CUBLAS_CHECK(cublasCreate(&blas));
  SS_CUBLAS_CHECK(cublasLtCreate(&lt));
  const size_t workspace_bytes = size_t{64} << 20;  // as cuda/gemm.cpp gives cuBLAS
  DeviceBuffer<char> workspace(workspace_bytes);
  SS_CUBLAS_CHECK(cublasSetWorkspace(blas, workspace.data(), workspace_bytes));

  std::printf(
      "| shape | rows | algorithm | tile id | stages id | split-K | us | TFLOP/s | weight TB/s "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    for (int64_t n : rows_list) {
      DeviceBuffer<__nv_bfloat16> w(size_t(s.out * s.in)), x(size_t(n * s.in)),
          y(size_t(n * s.out));
      fill(w, size_t(s.out * s.in), 0.02f);
      fill(x, size_t(n * s.in), 1.0f);
      const double flop = 2.0 * double(n) * double(s.out) * double(s.in);
      const double bytes = 2.0 * double(s.out) * double(s.in);
      auto report = [&](const char* what, int tile, int stages, int split, double us) {
        std::printf("| %s | %lld | %s | %d | %d | %d | %.1f | %.0f | %.2f |\n", s.name,
                    static_cast<long long>(n), what, tile, stages, split, us, flop / us / 1e6,
                    bytes / us / 1e6);
        std::fflush(stdout);
      };
      const float alpha = 1.0f, beta = 0.0f;
      report("cublasGemmEx default", -1, -1, -1, time_us([&] {
               SS_CUBLAS_CHECK(cublasGemmEx(
                   blas, CUBLAS_OP_T, CUBLAS_OP_N, int(s.out), int(n), int(s.in), &alpha, w.data(),
                   CUDA_R_16BF, int(s.in), x.data(), CUDA_R_16BF, int(s.in), &beta, y.data(),
                   CUDA_R_16BF, int(s.out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
             }));
      LtLinearLayout l =
          make_lt_linear_layout(n, s.out, s.in, s.in, s.out, CUDA_R_16BF, CUDA_R_16BF);
      cublasLtMatmulPreference_t pref = nullptr;
      SS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      SS_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &workspace_bytes, sizeof(workspace_bytes)));
      std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates));
      int found = 0;
      SS_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, l.desc, l.a, l.b, l.d, l.d, pref,
                                                     candidates, results.data(), &found));
      for (int i = 0; i < found; ++i) {
        const cublasLtMatmulAlgo_t& algo = results[size_t(i)].algo;
        if (results[size_t(i)].state != CUBLAS_STATUS_SUCCESS) continue;
        char name[32];
        std::snprintf(name, sizeof(name), "cuBLASLt #%d", i);
        report(name, attr_int(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
               attr_int(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
               attr_int(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), time_us([&] {
                 SS_CUBLAS_CHECK(cublasLtMatmul(lt, l.desc, &alpha, w.data(), l.a, x.data(), l.b,
                                                &beta, y.data(), l.d, y.data(), l.d, &algo,
                                                workspace.data(), workspace_bytes, nullptr));
               }));
      }
      cublasLtMatmulPreferenceDestroy(pref);
      destroy_lt_linear_layout(l);
    }
  }
  cublasLtDestroy(lt);
  cublasDestroy(blas);
  return 0;
}

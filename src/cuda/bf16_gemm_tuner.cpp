// Bf16GemmTuner (bf16_gemm_tuner.h): per-shape choice between cublasGemmEx's
// default and cuBLASLt's heuristic answers, timed once per row bucket.
#include "cuda/bf16_gemm_tuner.h"

#include <algorithm>
#include <vector>

#include "base/check.h"
#include "cuda/candidate_timing.h"
#include "cuda/cuda_check.h"

namespace specstack::cuda {
namespace {

// The bucket's upper bound: the next power of two >= n.
int64_t row_bucket(int64_t n) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return b;
}

}  // namespace

Bf16GemmTuner::Bf16GemmTuner(cudaStream_t stream, cublasHandle_t blas, void* workspace,
                             size_t workspace_bytes, int64_t max_rows, int candidates)
    : stream_(stream),
      blas_(blas),
      workspace_(workspace),
      workspace_bytes_(workspace_bytes),
      max_rows_(max_rows),
      candidates_(candidates) {
  SS_CUBLAS_CHECK(cublasLtCreate(&lt_));
}

Bf16GemmTuner::~Bf16GemmTuner() {
  for (auto& [key, p] : plans_) destroy_lt_linear_layout(p);
  if (lt_ != nullptr) cublasLtDestroy(lt_);
}

int Bf16GemmTuner::tuned_to_lt() const {
  return static_cast<int>(std::count_if(choice_.begin(), choice_.end(),
                                        [](const auto& kv) { return kv.second.use_lt; }));
}

Bf16GemmTuner::Plan& Bf16GemmTuner::plan(const ShapeKey& key) {
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  const auto& [n, out, in, ldx, ldy, type] = key;
  Plan p;
  static_cast<LtLinearLayout&>(p) =
      make_lt_linear_layout(n, out, in, ldx, ldy, CUDA_R_16BF, static_cast<cudaDataType_t>(type));
  return plans_.emplace(key, p).first->second;
}

cublasStatus_t Bf16GemmTuner::run_default(const void* x, int64_t ldx, const void* w, int64_t n,
                                          int64_t out, int64_t in, void* y, cudaDataType_t y_type,
                                          int64_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasGemmEx(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(n),
                      static_cast<int>(in), &alpha, w, CUDA_R_16BF, static_cast<int>(in), x,
                      CUDA_R_16BF, static_cast<int>(ldx), &beta, y, y_type, static_cast<int>(ldy),
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

cublasStatus_t Bf16GemmTuner::run_lt(Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x,
                                     const void* w, void* y) {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(lt_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.d, y, p.d, &algo,
                        workspace_, workspace_bytes_, stream_);
}

void Bf16GemmTuner::gemm(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                         int64_t in, void* y, cudaDataType_t y_type, int64_t ldy) {
  if (n < 2 || n > max_rows_ || candidates_ < 1) {
    SS_CUBLAS_CHECK(run_default(x, ldx, w, n, out, in, y, y_type, ldy));
    return;
  }
  const int type = static_cast<int>(y_type);
  const ShapeKey bucket{row_bucket(n), out, in, ldx, ldy, type};
  auto known = choice_.find(bucket);
  if (known == choice_.end()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) {  // no timing inside a capture
      SS_CUBLAS_CHECK(run_default(x, ldx, w, n, out, in, y, y_type, ldy));
      return;
    }
    Plan& p = plan(ShapeKey{n, out, in, ldx, ldy, type});
    known = choice_.emplace(bucket, tune(p, x, ldx, w, n, out, in, y, y_type, ldy)).first;
  }
  const Choice& c = known->second;
  if (c.use_lt) {
    Plan& p = plan(ShapeKey{n, out, in, ldx, ldy, type});
    if (p.lt_check == Plan::Check::kUnknown) {
      cublasLtMatmulHeuristicResult_t check{};
      const bool usable = cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.d, p.d, &c.algo,
                                                  &check) == CUBLAS_STATUS_SUCCESS &&
                          check.workspaceSize <= workspace_bytes_;
      p.lt_check = usable ? Plan::Check::kUsable : Plan::Check::kUnusable;
    }
    if (p.lt_check == Plan::Check::kUsable && run_lt(p, c.algo, x, w, y) == CUBLAS_STATUS_SUCCESS)
      return;
  }
  SS_CUBLAS_CHECK(run_default(x, ldx, w, n, out, in, y, y_type, ldy));
}

// Candidate 0 is cublasGemmEx's default, 1.. cuBLASLt's heuristic answers,
// timed by time_candidates (interleaved rounds, medians).
Bf16GemmTuner::Choice Bf16GemmTuner::tune(Plan& p, const void* x, int64_t ldx, const void* w,
                                          int64_t n, int64_t out, int64_t in, void* y,
                                          cudaDataType_t y_type, int64_t ldy) {
  constexpr float kMinGain = 0.03f;
  cublasLtMatmulPreference_t pref = nullptr;
  SS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  SS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(candidates_));
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt_, p.desc, p.a, p.b, p.d, p.d, pref, candidates_, results.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> lt;
  for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found; ++i) {
    if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS) lt.push_back(results[size_t(i)].algo);
  }
  const size_t count = 1 + lt.size();
  std::vector<bool> ok;
  const std::vector<float> median = time_candidates(
      stream_, count,
      [&](size_t i) {
        return (i == 0 ? run_default(x, ldx, w, n, out, in, y, y_type, ldy)
                       : run_lt(p, lt[i - 1], x, w, y)) == CUBLAS_STATUS_SUCCESS;
      },
      ok);
  SS_CHECK_MSG(ok[0], "cublasGemmEx failed on a shape the model needs");
  Choice c;
  float best = median[0] * (1.0f - kMinGain);
  for (size_t i = 1; i < count; ++i) {
    if (ok[i] && median[i] < best) {
      best = median[i];
      c.use_lt = true;
      c.algo = lt[i - 1];
    }
  }
  return c;
}

}  // namespace specstack::cuda

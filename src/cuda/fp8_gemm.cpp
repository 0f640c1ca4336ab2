#include "cuda/fp8_gemm.h"

#include <string>

#include "base/check.h"
#include "cuda/cuda_check.h"

namespace specstack::cuda {

Fp8Gemm::Fp8Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes,
                 const Fp8GemmOptions& options)
    : stream_(stream), options_(options), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  SS_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

Fp8Gemm::~Fp8Gemm() {
  for (auto& [key, p] : plans_) destroy(p);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

void Fp8Gemm::destroy(Plan& p) {
  if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
  if (p.a != nullptr) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b != nullptr) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d != nullptr) cublasLtMatrixLayoutDestroy(p.d);
  p = Plan();
}

// Column-major view, as Gemm::gemm: yᵀ [out, n] = W [in, out]ᵀ · xᵀ [in, n],
// i.e. A = w8 transposed, B = x8 not transposed: the "TN" layout Hopper's FP8
// GEMMs require. A's scale vector has M = out entries, B's N = n.
bool Fp8Gemm::make_plan(Plan& p, int64_t n, int64_t out, int64_t in, int64_t ldy, bool outer) {
  auto ok = [](cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; };
  SS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  SS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  SS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (outer) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    // Scale pointers set (to any aligned device address; matmul sets the
    // real ones) before the heuristic, which may check them.
    const void* placeholder = workspace_;
    if (!ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                           sizeof(mode))) ||
        !ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                           sizeof(mode))) ||
        !ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                           &placeholder, sizeof(placeholder))) ||
        !ok(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                           &placeholder, sizeof(placeholder)))) {
      outer_status_ = "setting the scale mode failed";
      return false;
    }
  }
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, static_cast<uint64_t>(in),
                                             static_cast<uint64_t>(out), in));
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, static_cast<uint64_t>(in),
                                             static_cast<uint64_t>(n), in));
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_16BF, static_cast<uint64_t>(out),
                                             static_cast<uint64_t>(n), ldy));
  cublasLtMatmulPreference_t pref = nullptr;
  SS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  SS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_, sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    if (outer) {
      outer_status_ = std::string("heuristic: ") + cublas_status_name(status) + ", " +
                      std::to_string(found) + " algorithms";
    }
    return false;
  }
  if (outer) outer_status_ = "supported";
  p.algo = result.algo;
  p.outer = outer;
  return true;
}

Fp8Gemm::Plan& Fp8Gemm::plan(int64_t n, int64_t out, int64_t in, int64_t ldy, bool want_outer) {
  const auto key = std::make_tuple(n, out, in, ldy, want_outer);
  auto found = plans_.find(key);
  if (found != plans_.end()) return found->second;
  Plan p;
  if (!want_outer || !make_plan(p, n, out, in, ldy, /*outer=*/true)) {
    destroy(p);
    if (!make_plan(p, n, out, in, ldy, /*outer=*/false)) {
      fail_cuda("cublasLtMatmulAlgoGetHeuristic", "no FP8 e4m3 GEMM algorithm for this shape",
                __FILE__, __LINE__);
    }
  }
  return plans_.emplace(key, p).first->second;
}

bool Fp8Gemm::matmul(const fp8* x8, const float* x_scale, const fp8* w8, const float* w_scale,
                     int64_t n, int64_t out, int64_t in, __nv_bfloat16* y, int64_t ldy,
                     bool defer_scales) {
  if (n == 0) return true;
  SS_CHECK_EQ(in % 16, 0);
  SS_CHECK_LE(out, ldy);
  Plan& p = plan(n, out, in, ldy, /*want_outer=*/!defer_scales);
  if (p.outer) {
    SS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                   &w_scale, sizeof(w_scale)));
    SS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                   &x_scale, sizeof(x_scale)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  SS_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w8, p.a, x8, p.b, &beta, y, p.d, y, p.d,
                                 &p.algo, workspace_, workspace_bytes_, stream_));
  last_outer_ = p.outer;
  if (p.outer) return true;
  if (defer_scales) return false;
  scale_outer_bf16(y, ldy, n, out, x_scale, w_scale, nullptr, stream_);
  return true;
}

}  // namespace specstack::cuda

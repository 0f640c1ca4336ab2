#include "cuda/gemm.h"

#include "base/check.h"
#include "cuda/elementwise.h"
#include "cuda/gemv.h"

namespace specstack::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t(64) << 20;
}

Gemm::Gemm(cudaStream_t stream) : stream_(stream) {
  SS_CUBLAS_CHECK(cublasCreate(&handle_));
  SS_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  workspace_.resize(kWorkspaceBytes);
  SS_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.nbytes()));
}

Gemm::~Gemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void Gemm::linear(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                  int64_t out, int64_t in, __nv_bfloat16* y, int64_t ldy, const float* bias) {
  if (gemv_supported(x, ldx, w, n, in)) {
    return gemv(x, ldx, w, n, out, in, y, nullptr, ldy, stream_, bias);
  }
  gemm(x, ldx, w, n, out, in, y, CUDA_R_16BF, ldy);
  if (bias != nullptr) {
    add_bias(y, static_cast<int32_t>(n), static_cast<int32_t>(out), ldy, bias, stream_);
  }
}

bool Gemm::fuses_bias(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                      int64_t in) {
  return gemv_supported(x, ldx, w, n, in);
}

void Gemm::gate_up_silu(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w_gate_up,
                        int64_t n, int64_t width, int64_t in, __nv_bfloat16* gate_up,
                        __nv_bfloat16* act) {
  if (n == 0) return;
  if (gemv_supported(x, ldx, w_gate_up, n, in)) {
    return gemv_silu_mul(x, ldx, w_gate_up, n, width, in, act, stream_);
  }
  gemm(x, ldx, w_gate_up, n, 2 * width, in, gate_up, CUDA_R_16BF, 2 * width);
  silu_mul(gate_up, static_cast<int32_t>(n), static_cast<int32_t>(width), act, stream_);
}

void Gemm::linear_f32(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                      int64_t out, int64_t in, float* y, int64_t ldy) {
  if (gemv_supported(x, ldx, w, n, in))
    return gemv(x, ldx, w, n, out, in, nullptr, y, ldy, stream_);
  gemm(x, ldx, w, n, out, in, y, CUDA_R_32F, ldy);
}

void Gemm::gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
                int64_t in, void* y, cudaDataType_t y_type, int64_t ldy) {
  if (n == 0) return;
  SS_CHECK_LE(in, ldx);
  SS_CHECK_LE(out, ldy);
  // Column-major view: yᵀ [out, n] = W [in, out]ᵀ · xᵀ [in, n].
  const float alpha = 1.0f, beta = 0.0f;
  SS_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out),
                               static_cast<int>(n), static_cast<int>(in), &alpha, w, CUDA_R_16BF,
                               static_cast<int>(in), x, CUDA_R_16BF, static_cast<int>(ldx), &beta,
                               y, y_type, static_cast<int>(ldy), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

}  // namespace specstack::cuda

// cuBLAS GEMMs in the shapes the model needs, bf16 operands with fp32
// accumulation. Row-major thinking throughout: a "linear" is y = x · wᵀ with
// HF's [out, in] weights; cuBLAS's column-major view is handled here once.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/device_buffer.h"

namespace specstack::cuda {

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[n, out] = x[n, in] · w[out, in]ᵀ.   x rows with stride ldx, y rows with stride ldy.
  // Up to kGemvMaxRows rows (decode) run the bandwidth kernel of gemv.h.
  // With bias [out] f32 it is added to every row (fused into gemv's epilogue).
  void linear(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, int64_t ldy, const float* bias = nullptr);
  // act[n, width] = bf16(silu(x · w_gate_upᵀ[:, :width]) * (x · w_gate_upᵀ[:, width:])):
  // gemv_silu_mul for decode rows, else a GEMM into gate_up [n, 2 * width] + silu_mul.
  void gate_up_silu(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w_gate_up, int64_t n,
                    int64_t width, int64_t in, __nv_bfloat16* gate_up, __nv_bfloat16* act);
  // The same with an f32 output (logits, router scores).
  void linear_f32(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                  int64_t out, int64_t in, float* y, int64_t ldy);

  // Whether linear() adds a bias inside the GEMM for these operands (the
  // gemv path's epilogue); otherwise it adds it in a kernel of its own, which
  // a caller may fold into its next kernel instead (rope_write_kv).
  static bool fuses_bias(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                         int64_t in);

  cublasHandle_t handle() { return handle_; }

 private:
  void gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
            int64_t in, void* y, cudaDataType_t y_type, int64_t ldy);

  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  // A fixed workspace so cuBLAS never allocates (required inside graph capture).
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace specstack::cuda

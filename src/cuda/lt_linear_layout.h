// cuBLASLt descriptors of a linear layer y[n, out] = x[n, in] · w[out, in]ᵀ
// in cublasGemmEx's column-major view: yᵀ [out, n] = W [in, out]ᵀ · xᵀ [in, n],
// i.e. A = w transposed, B = x not transposed (the "TN" layout Hopper's FP8
// GEMMs require too). Shared by the bf16 GEMM tuner and the FP8 GEMM, which
// add their own attributes (scale modes) to `desc`.
#pragma once

#include <cublasLt.h>

#include <cstdint>

namespace specstack::cuda {

struct LtLinearLayout {
  cublasLtMatmulDesc_t desc = nullptr;  // f32 compute and scale, A transposed
  cublasLtMatrixLayout_t a = nullptr;   // w: [in, out] column-major, ld in
  cublasLtMatrixLayout_t b = nullptr;   // x: [in, n], ld ldx
  cublasLtMatrixLayout_t d = nullptr;   // y: [out, n], ld ldy
};

// Creates the four descriptors; w and x have operand_type, y has y_type.
// Failures abort with the cuBLAS status (SS_CUBLAS_CHECK).
LtLinearLayout make_lt_linear_layout(int64_t n, int64_t out, int64_t in, int64_t ldx, int64_t ldy,
                                     cudaDataType_t operand_type, cudaDataType_t y_type);

// Destroys what make_lt_linear_layout created (null members are skipped)
// and leaves every member null.
void destroy_lt_linear_layout(LtLinearLayout& layout);

}  // namespace specstack::cuda

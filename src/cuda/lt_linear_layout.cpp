#include "cuda/lt_linear_layout.h"

#include "cuda/cuda_check.h"

namespace specstack::cuda {

LtLinearLayout make_lt_linear_layout(int64_t n, int64_t out, int64_t in, int64_t ldx, int64_t ldy,
                                     cudaDataType_t operand_type, cudaDataType_t y_type) {
  LtLinearLayout l;
  SS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&l.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  SS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  SS_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(l.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.a, operand_type, static_cast<uint64_t>(in),
                                             static_cast<uint64_t>(out), in));
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.b, operand_type, static_cast<uint64_t>(in),
                                             static_cast<uint64_t>(n), ldx));
  SS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l.d, y_type, static_cast<uint64_t>(out),
                                             static_cast<uint64_t>(n), ldy));
  return l;
}

void destroy_lt_linear_layout(LtLinearLayout& l) {
  if (l.desc != nullptr) cublasLtMatmulDescDestroy(l.desc);
  if (l.a != nullptr) cublasLtMatrixLayoutDestroy(l.a);
  if (l.b != nullptr) cublasLtMatrixLayoutDestroy(l.b);
  if (l.d != nullptr) cublasLtMatrixLayoutDestroy(l.d);
  l = LtLinearLayout();
}

}  // namespace specstack::cuda

#include "cuda/cuda_check.h"
#include "cuda/row_scatter.h"

namespace specstack::cuda {

namespace {

// One CTA per row; consecutive threads copy consecutive columns.
__global__ void scatter_rows_kernel(const __nv_bfloat16* src, const int32_t* rows, int32_t cols,
                                    __nv_bfloat16* dst, int64_t ld_dst) {
  const int64_t i = blockIdx.x;
  const int64_t row = rows[i];
  for (int32_t c = threadIdx.x; c < cols; c += blockDim.x) {
    dst[row * ld_dst + c] = src[i * cols + c];
  }
}

}  // namespace

void scatter_rows(const __nv_bfloat16* src, const int32_t* rows, int32_t n, int32_t cols,
                  __nv_bfloat16* dst, int64_t ld_dst, cudaStream_t stream) {
  if (n <= 0) return;
  scatter_rows_kernel<<<n, 256, 0, stream>>>(src, rows, cols, dst, ld_dst);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

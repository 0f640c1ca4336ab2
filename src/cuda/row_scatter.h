// The inverse of gather_rows, for the paged-attention subset of a step whose
// rows are not one contiguous range.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

// dst[rows[i] * ld_dst + c] = src[i * cols + c].   src [n, cols] bf16, rows [n] distinct
void scatter_rows(const __nv_bfloat16* src, const int32_t* rows, int32_t n, int32_t cols,
                  __nv_bfloat16* dst, int64_t ld_dst, cudaStream_t stream);

}  // namespace specstack::cuda

// Device helper shared by the GEMV kernels (gemv.cu, fp8_gemv.cu): a block
// of kWarps warps computes kWarps / kSplit output rows, each split over kSplit
// warps along the input dimension; every warp holds its part's kValues sums
// already reduced over its lanes.
#pragma once

namespace specstack::cuda {

// The kSplit partial sums of each output row of the block, added in a fixed
// order (deterministic); valid in every thread of the row's first warp. Every
// thread of the block must call it (it synchronises the block).
template <int kWarps, int kSplit, int kValues>
__device__ inline void reduce_parts(float (&value)[kValues], int warp, int lane) {
  if constexpr (kSplit > 1) {
    __shared__ float parts[kWarps][kValues];
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < kValues; ++i) parts[warp][i] = value[i];
    }
    __syncthreads();
    const int first = warp - warp % kSplit;
#pragma unroll
    for (int i = 0; i < kValues; ++i) {
      value[i] = 0.0f;
#pragma unroll
      for (int p = 0; p < kSplit; ++p) value[i] += parts[first + p][i];
    }
  }
}

}  // namespace specstack::cuda

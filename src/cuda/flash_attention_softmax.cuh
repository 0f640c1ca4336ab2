// What the consumer warpgroups of the two wgmma prefill attention kernels
// share (flash_attention_hopper.cu on bf16 operands, flash_attention_fp8.cu
// on e4m3): the per-tile softmax of a 64-row x 128-key score tile in the
// m64n128 f32 accumulator layout (this thread: rows g and g + 8 of its warp's
// 16, columns 8 j + 2 t + e, s[4 j + e] and s[4 j + 2 + e]), causally masked,
// folded into the running (max, sum) of its two rows, the O accumulator
// rescaled to match, and the final 1 / sum. Factored out of the bf16 kernel in
// session 45 with both kernels' sm_90a cubins byte-identical before and after.
// (The loop over key tiles around them is still written out in each kernel:
// as a shared template it changed the bf16 kernel's code, which could not be
// run on a GPU that session.)
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/ptx_primitives.cuh"

namespace specstack::cuda::flash_softmax {

constexpr unsigned kFullMask = 0xffffffffu;

// Causal mask of the tile of keys k0 .. k0 + kBlockN - 1: key k0 + 8 j + 2 t4
// + e is visible to a row iff 8 j + e <= lim - k0 - 2 t4 (lim: the row's last
// visible key slot); no key positions are read.
template <int kBlockN>
__device__ __forceinline__ void causal_mask(float (&s)[64], int32_t k0, int32_t lim0, int32_t lim1,
                                            int t4) {
  const int32_t c0 = lim0 - k0 - 2 * t4, c1 = lim1 - k0 - 2 * t4;
#pragma unroll
  for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (8 * j + e > c0) s[4 * j + e] = -INFINITY;
      if (8 * j + e > c1) s[4 * j + 2 + e] = -INFINITY;
    }
  }
}

// Folds the (masked) raw scores of a tile into the online softmax of rows g
// (i = 0) and g + 8 (i = 1): row_max holds raw scores, row_sum this thread's
// partial sum, alpha the factor O must be rescaled by before this tile's P V;
// s becomes p = exp2((s - max) * scale_log2[i]). A row with nothing visible
// yet subtracts 0, so exp2(-inf) = 0 instead of NaN.
template <int kBlockN>
__device__ __forceinline__ void online_softmax(float (&s)[64], float (&row_max)[2],
                                               float (&row_sum)[2], float (&alpha)[2],
                                               float scale_log2_0, float scale_log2_1) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float scale_log2 = i == 0 ? scale_log2_0 : scale_log2_1;
    float mx = row_max[i];
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j)
      mx = fmaxf(mx, fmaxf(s[4 * j + 2 * i], s[4 * j + 2 * i + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
    const float sub = mx == -INFINITY ? 0.0f : mx * scale_log2;
    alpha[i] = ptx::fast_exp2(row_max[i] * scale_log2 - sub);  // old max -inf -> 0
    row_max[i] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kBlockN / 8; ++j) {
      s[4 * j + 2 * i] = ptx::fast_exp2(fmaf(s[4 * j + 2 * i], scale_log2, -sub));
      s[4 * j + 2 * i + 1] = ptx::fast_exp2(fmaf(s[4 * j + 2 * i + 1], scale_log2, -sub));
      sum += s[4 * j + 2 * i] + s[4 * j + 2 * i + 1];
    }
    row_sum[i] = row_sum[i] * alpha[i] + sum;
  }
}

// O (m64nN accumulator, N = head dim) times each row's alpha.
template <int kHeadDim>
__device__ __forceinline__ void rescale(float (&o)[kHeadDim / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) {
    o[4 * j] *= alpha[0];
    o[4 * j + 1] *= alpha[0];
    o[4 * j + 2] *= alpha[1];
    o[4 * j + 3] *= alpha[1];
  }
}

// 1 / (the row's sum over its quad), or 0 for a row that saw no key.
__device__ __forceinline__ void inverse_row_sums(const float (&row_sum)[2], float (&inv)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    float l = row_sum[i];
    l += __shfl_xor_sync(kFullMask, l, 1);
    l += __shfl_xor_sync(kFullMask, l, 2);
    inv[i] = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
  }
}

}  // namespace specstack::cuda::flash_softmax

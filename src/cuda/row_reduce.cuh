// Warp and CTA reductions shared by the row kernels (elementwise.cu's norms,
// norm_quantize_fp8.cu, attention.cu), and the norms' launch width and
// register passes. One
// definition on purpose: norm_quantize_fp8's sum of squares is bit-identical
// to rmsnorm's only while both add the same floats in the same order
// (Fp8Fusion.NormQuantizeEqualsNormThenQuantize checks it).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/pdl.h"

namespace specstack::cuda {

constexpr int kRowWarp = 32;

// Butterfly sum / max over the 32 lanes; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kRowWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kRowWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the CTA; every thread gets the total. blockDim.x is a multiple of
// 32; `partials` is [32] shared floats, free again when this returns.
__device__ __forceinline__ float block_sum(float v, float* partials) {
  v = warp_sum(v);
  const int lane = threadIdx.x % kRowWarp;
  const int warp = threadIdx.x / kRowWarp;
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / kRowWarp;
  // Every warp reduces the partials itself: no second broadcast barrier.
  const float total = warp_sum(lane < n_warps ? partials[lane] : 0.0f);
  __syncthreads();  // all reads of `partials` done before anyone reuses it
  return total;
}

// Max over the CTA (exact in any order); every thread gets it. Same contract
// as block_sum.
__device__ __forceinline__ float block_max(float v, float* partials) {
  v = warp_max(v);
  const int lane = threadIdx.x % kRowWarp;
  const int warp = threadIdx.x / kRowWarp;
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  const int n_warps = blockDim.x / kRowWarp;
  const float result = warp_max(lane < n_warps ? partials[lane] : -INFINITY);
  __syncthreads();
  return result;
}

// Threads for a row of `dim` elements read w at a time: one vector per
// thread, a whole number of warps, at most 1024. A decode step's norms are a
// few rows each on one SM, so their time is latency: with four vectors per
// thread each thread's loads were four dependent round trips (ncu, H100,
// 0.5B draft at 64 rows: 5.1 us per norm, 49 per forward).
inline int row_threads(int32_t dim, int w) {
  const int64_t vectors = (static_cast<int64_t>(dim) + w - 1) / w;
  const int64_t threads = (vectors + kRowWarp - 1) / kRowWarp * kRowWarp;
  return static_cast<int>(std::clamp<int64_t>(threads, kRowWarp, 1024));
}

// Launches Kernel<W, kIters>::fn, one CTA a row of dim, with the fewest
// register passes kIters (1, 2, 4 or 8) that hold the row in
// row_threads(dim, W) threads of W elements each (PDL launch).
template <int W, template <int, int> class Kernel, typename... Args>
void launch_norm(int32_t rows, int32_t dim, cudaStream_t stream, Args... args) {
  const int threads = row_threads(dim, W);
  const int64_t iters = (int64_t{dim} + int64_t{threads} * W - 1) / (int64_t{threads} * W);
  const dim3 grid(static_cast<unsigned>(rows));
  if (iters <= 1) return launch_pdl(Kernel<W, 1>::fn, grid, threads, 0, stream, true, args...);
  if (iters <= 2) return launch_pdl(Kernel<W, 2>::fn, grid, threads, 0, stream, true, args...);
  if (iters <= 4) return launch_pdl(Kernel<W, 4>::fn, grid, threads, 0, stream, true, args...);
  if (iters <= 8) return launch_pdl(Kernel<W, 8>::fn, grid, threads, 0, stream, true, args...);
  fail_cuda("rmsnorm", "row too long (more than 8 x 1024 vectors)", __FILE__, __LINE__);
}

}  // namespace specstack::cuda

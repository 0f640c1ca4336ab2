// Key-slot helpers the two prefill attention kernels share (flash_attention.cu's
// mma.sync kernel and flash_attention_hopper.cu's wgmma one): a key slot's
// physical cache row through the block table, and a sliding window's first key
// tile. Both kernels must agree on these exactly, since either may run a
// sequence's chunks (the Hopper kernel where sm_90a is compiled in).
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "cuda/flash_attention.h"

namespace specstack::cuda::flash_rows {

// Physical cache row of key slot j, or -1 past the sequence's keys.
__device__ __forceinline__ int32_t physical_row(const FlashAttentionArgs& a, int32_t j) {
  if (j >= a.n_keys) return -1;
  return __ldg(a.block_table + j / a.block_size) * a.block_size + j % a.block_size;
}

__device__ __forceinline__ int32_t clamp_i32(int64_t v) {
  return static_cast<int32_t>(v < INT_MIN ? INT_MIN : (v > INT_MAX ? INT_MAX : v));
}

// Sliding window: the first key tile that can hold a key visible by position,
// i.e. the first slot in [0, kv_end) whose position is > min_thresh (the
// smallest q_pos - window of the CTA's rows), divided by kBlockN; n_tiles if
// none. Exact for any positions: every position before the answer is read.
// The last key of tile 0 is checked first (one load), which settles the
// common case of a context shorter than the window; then rounds of kThreads *
// kPerThread keys whose loads are all independent. Every thread of the CTA
// calls it; red: kThreads / 32 i32 of shared memory.
template <int kThreads, int kBlockN, int kPerThread>
__device__ int32_t first_window_tile(const FlashAttentionArgs& a, int32_t kv_end,
                                     int32_t min_thresh, int32_t* red) {
  constexpr unsigned kAll = 0xffffffffu;
  const int32_t n_tiles = (kv_end + kBlockN - 1) / kBlockN;
  if (kv_end <= kBlockN || __ldg(a.slot_positions + physical_row(a, kBlockN - 1)) > min_thresh) {
    return 0;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int32_t base = 0; base < kv_end; base += kThreads * kPerThread) {
    int32_t first = INT_MAX;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int32_t j = base + i * kThreads + static_cast<int32_t>(threadIdx.x);
      if (j < kv_end && __ldg(a.slot_positions + physical_row(a, j)) > min_thresh) {
        first = min(first, j);
      }
    }
    first = __reduce_min_sync(kAll, first);
    if (lane == 0) red[warp] = first;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) first = min(first, red[w]);
    __syncthreads();                               // red is reused by the next round
    if (first != INT_MAX) return first / kBlockN;  // uniform across the CTA
  }
  return n_tiles;
}

}  // namespace specstack::cuda::flash_rows

// What the two run kernels of verify_attention.cu share (the mma.sync one
// and the Hopper wgmma one of verify_attention_wgmma.cuh): the CTA shape, the
// key tile, the per-CTA facts; and the split-K workspace entry (attention.cu
// too).
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "cuda/attention.h"

namespace specstack::cuda::run_kernel {

constexpr int kThreads = 128;  // one warpgroup
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 64;  // keys per pipeline stage
constexpr float kLog2e = 1.4426950408889634f;

// What every part of a run kernel needs about its CTA: the run's first token
// t0, its kv head, the partition and its first slot / key count / tiles, the
// GQA group g and the query vectors n_q (= rows x g).
struct Cta {
  int32_t t0, kvh, part, g, n_q, start, n_keys, n_tiles;
};

// Float offset of the split-K partial of token t, head `head`, partition
// `part` in paged_attention's workspace [n_tokens, n_heads, n_parts,
// head_dim + 2]: the partition's unnormalised acc[head_dim], then its max (log2
// domain), then its sum of exp2(score - max). Every attention kernel that
// splits K (attention.cu, the run kernels) and the combines use it.
__device__ __forceinline__ int64_t workspace_entry(int32_t t, int32_t head, int32_t part,
                                                   int32_t n_heads, int32_t n_parts,
                                                   int32_t head_dim) {
  return ((static_cast<int64_t>(t) * n_heads + head) * n_parts + part) * (head_dim + 2);
}

// The lane's two query vectors of an M tile of 16 (m0 + g and m0 + g + 8,
// g = lane / 4; vector m = row m / group, head m % group of the run): their
// visibility (slot index <= row_slot, key position > row_lim) and Q as the
// A fragments of an m16n8k16 / m64nNk16 product (the two layouts agree per
// warp): qf[ks] = {lo at k 2t, hi at k 2t, lo at k 2t + 8, hi at k 2t + 8} of
// the 16-dim k-step ks, t = lane % 4. Padding vectors (m >= n_q) have Q = 0 and
// see every loaded key: finite, never written out.
template <int kHeadDim>
__device__ __forceinline__ void load_query_fragments(const PagedAttentionArgs& a, const Cta& c,
                                                     int m0, int32_t (&row_slot)[2],
                                                     int32_t (&row_lim)[2],
                                                     uint32_t (&qf)[kHeadDim / 16][4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2;
  const int tq = lane & 3;
  const __nv_bfloat16* q_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = m0 + g + h * 8;
    row_slot[h] = INT_MAX;
    row_lim[h] = INT_MIN;
    q_row[h] = nullptr;
    if (m < c.n_q) {
      const int32_t t = c.t0 + m / c.g;
      row_slot[h] = a.token_slot[t];
      if (a.sliding_window > 0) row_lim[h] = a.token_pos[t] - a.sliding_window;
      q_row[h] = a.q + t * a.q_stride + (static_cast<int64_t>(c.kvh) * c.g + m % c.g) * kHeadDim;
    }
  }
#pragma unroll
  for (int ks = 0; ks < kHeadDim / 16; ++ks) {
    const int col = ks * 16 + tq * 2;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      qf[ks][h] = q_row[h] ? __ldg(reinterpret_cast<const uint32_t*>(q_row[h] + col)) : 0u;
      qf[ks][h + 2] = q_row[h] ? __ldg(reinterpret_cast<const uint32_t*>(q_row[h] + col + 8)) : 0u;
    }
  }
}

}  // namespace specstack::cuda::run_kernel

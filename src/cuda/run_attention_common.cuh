// What the two run kernels of verify_attention.cu share (the mma.sync one
// and the Hopper wgmma one of verify_attention_wgmma.cuh): the CTA shape, the
// key tile, the per-CTA facts; and the split-K workspace entry (attention.cu
// too).
#pragma once

#include <cstdint>

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

}  // namespace specstack::cuda::run_kernel

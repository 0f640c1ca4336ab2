// Paged decode attention (split-K over partitions of kPartitionSize slots,
// merged by log-sum-exp), gather_kv and masked_softmax. Contracts and the
// visibility rule are in attention.h; the CPU twin is CpuBackend::attention.
//
// paged_attention, one CTA per (token, kv head, partition), 128 threads:
//  1. the partition's key slots are resolved once into flat slot indices
//     (-1 where the sliding window hides the key) in shared memory;
//  2. QK: head_dim / 8 lanes share one key row (one 16-byte load each); up to
//     kHeadsPerPass query heads of the kv group are held in registers
//     (pre-scaled by scale * log2 e, so the softmax uses exp2) and each K row
//     load serves all of them; dot products are reduced with shuffles into
//     s_p[head][key];
//  3. a per-head softmax over the partition (max and sum, fp32);
//  4. PV: each warp owns a quarter of head_dim and walks every key of the
//     partition (no cross-warp reduction); lanes of a warp split keys and are
//     reduced with shuffles at the end.
// A group of more than kHeadsPerPass heads (qwen's 7) takes several passes
// over the partition's K and V (the second mostly from L2): measured on an
// H200 that beats holding 8 heads in registers, because occupancy (80
// registers, 6 CTAs per SM) is what keeps enough loads in flight here.
// With one partition the CTA writes bf16 out directly; otherwise it writes
// (unnormalised acc, max, sum) to the workspace and combine_kernel merges.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/row_reduce.cuh"
#include "cuda/run_attention_common.cuh"
#include "cuda/verify_attention.h"

namespace specstack::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxGroup = 16;     // query heads per kv head
constexpr int kMaxHeadDim = 256;  // combine_kernel: head_dim <= kCombineThreads
constexpr int kHeadsPerPass = 4;  // query heads held in registers at once (see above)
constexpr int kUnroll = 4;        // K/V row loads each lane issues before using any
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

static_assert(kPartitionSize % 32 == 0, "partition must be whole warps of keys");

int32_t num_partitions(int32_t max_context, int32_t partition_size) {
  return max_context <= partition_size ? 1 : (max_context + partition_size - 1) / partition_size;
}

// Workspace entries: run_kernel::workspace_entry (cuda/run_attention_common.cuh).
using run_kernel::workspace_entry;

// N consecutive bf16 as one load: 16 bytes for N = 8, 8 bytes for N = 4.
template <int N>
struct RawVec;
template <>
struct RawVec<8> {
  using type = uint4;
};
template <>
struct RawVec<4> {
  using type = uint2;
};

template <int N>
__device__ __forceinline__ typename RawVec<N>::type load_raw(const bf16* src) {
  return __ldg(reinterpret_cast<const typename RawVec<N>::type*>(src));
}

template <int N>
__device__ __forceinline__ void raw_to_f32(const typename RawVec<N>::type& raw, float* dst) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    dst[2 * i] = f.x;
    dst[2 * i + 1] = f.y;
  }
}

// grid (n_tokens, n_kv_heads, n_parts), kThreads threads.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    paged_attention_kernel(const PagedAttentionArgs a, const int32_t n_parts) {
  pdl_begin();
  // QK: kQkLanes lanes per key row, 8 dims each.
  constexpr int kQkLanes = kHeadDim / 8;
  constexpr int kQkKeysPerWarp = 32 / kQkLanes;
  constexpr int kQkStride = kWarps * kQkKeysPerWarp;  // keys one step of the CTA covers
  // PV: warp w owns dims [w * kWarpDims, (w + 1) * kWarpDims), kPvVec per lane.
  constexpr int kWarpDims = kHeadDim / kWarps;
  constexpr int kPvVec = kWarpDims >= 8 ? 8 : 4;
  constexpr int kPvLanes = kWarpDims / kPvVec;
  constexpr int kPvKeysPerWarp = 32 / kPvLanes;
  static_assert(kQkLanes >= 1 && kQkLanes <= 32 && 32 % kQkLanes == 0, "head_dim");
  static_assert(kPvLanes >= 1 && 32 % kPvLanes == 0 && kWarpDims % kPvVec == 0, "head_dim");

  __shared__ float s_p[kMaxGroup][kPartitionSize];  // scores (log2 units), then exp2(score - max)
  __shared__ int32_t s_flat[kPartitionSize];        // flat slot of each key, -1 when hidden
  __shared__ float s_max[kMaxGroup];                // per head of the group
  __shared__ float s_sum[kMaxGroup];

  const int32_t t = blockIdx.x;
  const int32_t kvh = blockIdx.y;
  const int32_t part = blockIdx.z;
  const int32_t g = a.n_heads / a.n_kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  const int32_t own_slot = a.token_slot[t];
  const int32_t start = part * a.partition_size;
  // Keys [start, start + n_keys) of this partition are at or before the query's slot.
  const int32_t n_keys = min(a.partition_size, own_slot + 1 - start);
  if (n_keys <= 0) {
    // Nothing visible here: the combine skips this partition. With a single
    // partition (only when own_slot < 0, e.g. a padding token) write zeros.
    if (n_parts == 1) {
      for (int i = tid; i < g * kHeadDim; i += kThreads) {
        const int64_t head = static_cast<int64_t>(kvh) * g + i / kHeadDim;
        a.out[t * a.out_stride + head * kHeadDim + i % kHeadDim] = __float2bfloat16(0.0f);
      }
    }
    return;  // uniform across the CTA: no barrier has been reached yet
  }

  // 1. Resolve slots and the sliding-window mask once.
  {
    const int32_t* table =
        a.block_tables + static_cast<int64_t>(a.token_seq[t]) * a.max_blocks_per_seq;
    const int64_t lowest_hidden = static_cast<int64_t>(a.token_pos[t]) - a.sliding_window;
    for (int i = tid; i < n_keys; i += kThreads) {
      const int32_t j = start + i;
      const int32_t flat = table[j / a.block_size] * a.block_size + j % a.block_size;
      const bool visible = a.sliding_window <= 0 || a.slot_positions[flat] > lowest_hidden;
      s_flat[i] = visible ? flat : -1;
    }
  }
  __syncthreads();

  const int64_t kv_row = static_cast<int64_t>(a.n_kv_heads) * kHeadDim;  // elements per slot
  const float q_scale = a.scale * kLog2e;

  // 2. QK scores.
  {
    const int qk_sub = lane / kQkLanes;  // which key of the warp's kQkKeysPerWarp
    const int qk_dim = (lane % kQkLanes) * 8;
    const bf16* q_group = a.q + t * a.q_stride + static_cast<int64_t>(kvh) * g * kHeadDim + qk_dim;
    const bf16* k_base = a.k_cache + static_cast<int64_t>(kvh) * kHeadDim + qk_dim;
    for (int hb = 0; hb < g; hb += kHeadsPerPass) {
      float qr[kHeadsPerPass][8];  // this lane's 8 dims of heads hb .. hb + 3
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          qr[hh][e] =
              hb + hh < g ? __bfloat162float(q_group[(hb + hh) * kHeadDim + e]) * q_scale : 0.0f;
        }
      }
      // base is warp-uniform, so every lane reaches the shuffles. Each lane
      // issues kUnroll row loads before using any (memory-level parallelism).
      for (int base = warp * kQkKeysPerWarp; base < n_keys; base += kQkStride * kUnroll) {
        int32_t flat[kUnroll];
        uint4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = base + u * kQkStride + qk_sub;
          flat[u] = i < n_keys ? s_flat[i] : -1;
          raw[u] = flat[u] >= 0 ? load_raw<8>(k_base + flat[u] * kv_row) : uint4{0, 0, 0, 0};
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int i = base + u * kQkStride + qk_sub;
          float k[8];
          raw_to_f32<8>(raw[u], k);
#pragma unroll
          for (int hh = 0; hh < kHeadsPerPass; ++hh) {
            if (hb + hh < g) {  // uniform
              float s = 0.0f;
#pragma unroll
              for (int e = 0; e < 8; ++e) s = fmaf(qr[hh][e], k[e], s);
#pragma unroll
              for (int off = kQkLanes / 2; off > 0; off >>= 1) {
                s += __shfl_xor_sync(kFullMask, s, off);
              }
              if (lane % kQkLanes == 0 && i < n_keys) {
                s_p[hb + hh][i] = flat[u] >= 0 ? s : -INFINITY;
              }
            }
          }
        }
      }
    }
  }
  __syncthreads();

  // 3. Softmax over the partition, one warp per head; each lane rewrites only
  // the entries it read.
  for (int h = warp; h < g; h += kWarps) {
    float m = -INFINITY;
    for (int i = lane; i < n_keys; i += 32) m = fmaxf(m, s_p[h][i]);
    m = warp_max(m);
    float l = 0.0f;
    for (int i = lane; i < n_keys; i += 32) {
      const float p = m == -INFINITY ? 0.0f : exp2f(s_p[h][i] - m);
      s_p[h][i] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      s_max[h] = m;
      s_sum[h] = l;
    }
  }
  __syncthreads();

  // 4. PV.
  const int pv_sub = lane / kPvLanes;  // key stream of this lane
  const int dim0 = warp * kWarpDims + (lane % kPvLanes) * kPvVec;
  const bf16* v_base = a.v_cache + static_cast<int64_t>(kvh) * kHeadDim + dim0;
  for (int hb = 0; hb < g; hb += kHeadsPerPass) {
    float acc[kHeadsPerPass][kPvVec];
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
#pragma unroll
      for (int e = 0; e < kPvVec; ++e) acc[hh][e] = 0.0f;
    }
    for (int i0 = pv_sub; i0 < n_keys; i0 += kPvKeysPerWarp * kUnroll) {
      int32_t flat[kUnroll];
      typename RawVec<kPvVec>::type raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int i = i0 + u * kPvKeysPerWarp;
        // Keys hidden by the window have probability 0: skip their loads.
        flat[u] = i < n_keys ? s_flat[i] : -1;
        raw[u] = flat[u] >= 0 ? load_raw<kPvVec>(v_base + flat[u] * kv_row)
                              : typename RawVec<kPvVec>::type{};
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (flat[u] < 0) continue;
        const int i = i0 + u * kPvKeysPerWarp;
        float v[kPvVec];
        raw_to_f32<kPvVec>(raw[u], v);
#pragma unroll
        for (int hh = 0; hh < kHeadsPerPass; ++hh) {
          if (hb + hh < g) {
            const float p = s_p[hb + hh][i];
#pragma unroll
            for (int e = 0; e < kPvVec; ++e) acc[hh][e] = fmaf(p, v[e], acc[hh][e]);
          }
        }
      }
    }
    // Sum the key streams (lanes with equal lane % kPvLanes).
#pragma unroll
    for (int hh = 0; hh < kHeadsPerPass; ++hh) {
      if (hb + hh < g) {  // uniform
#pragma unroll
        for (int e = 0; e < kPvVec; ++e) {
#pragma unroll
          for (int off = 16; off >= kPvLanes; off >>= 1) {
            acc[hh][e] += __shfl_xor_sync(kFullMask, acc[hh][e], off);
          }
        }
      }
    }
    if (pv_sub == 0) {
#pragma unroll
      for (int hh = 0; hh < kHeadsPerPass; ++hh) {
        const int32_t h = hb + hh;
        if (h >= g) continue;
        const int32_t head = kvh * g + h;
        if (n_parts == 1) {
          const float l = s_sum[h];
          const float inv = l > 0.0f ? 1.0f / l : 0.0f;
          bf16* o = a.out + t * a.out_stride + static_cast<int64_t>(head) * kHeadDim + dim0;
#pragma unroll
          for (int e = 0; e < kPvVec; ++e) o[e] = __float2bfloat16(acc[hh][e] * inv);
        } else {
          float* w =
              a.workspace + workspace_entry(t, head, part, a.n_heads, n_parts, kHeadDim) + dim0;
#pragma unroll
          for (int e = 0; e < kPvVec; ++e) w[e] = acc[hh][e];
        }
      }
    }
  }
  if (n_parts > 1 && tid < g) {
    float* w = a.workspace + workspace_entry(t, kvh * g + tid, part, a.n_heads, n_parts, kHeadDim);
    w[kHeadDim] = s_max[tid];
    w[kHeadDim + 1] = s_sum[tid];
  }
}

// The workspace entries of a token to merge: with partition_size > 0 the
// partitions at or before its own slot (later ones were never written, and
// none for padding, own_slot < 0); with 0 (the run kernel's run-time split)
// all n_parts, the empty ones marked with max -inf.
__device__ __forceinline__ int32_t partitions_written(int32_t own_slot, int32_t n_parts,
                                                      int32_t partition_size) {
  if (partition_size == 0) return n_parts;
  return own_slot < 0 ? 0 : min(n_parts, own_slot / partition_size + 1);
}

// An entry's weight 2^(m_p - M) against the overall max M (finite): 0 for an
// empty entry (m_p = -inf), whose l and acc callers must not read (its acc
// is unwritten), so they skip entries of weight 0 (an underflowed weight
// adds nothing either).
__device__ __forceinline__ float partition_weight(float m_p, float m) {
  return m_p == -INFINITY ? 0.0f : exp2f(m_p - m);
}

// Merges the partitions of one (token, head): out = sum_p acc_p 2^(m_p - M) /
// sum_p l_p 2^(m_p - M). grid (n_tokens, n_heads), kCombineThreads threads.
// partition_size > 0: the partitions at or before the token's own slot were
// written; 0 (the run kernel's run-time split): all n_parts were, the empty
// ones with max -inf. Entries with max -inf have weight 0 and their acc is
// never used (an empty one's acc is unwritten). M and the sum of weights are
// reduced across the CTA; for acc, kCombineThreads / head_dim thread groups
// take every group-th partition (kCombineUnroll loads in flight per thread:
// a serial loop over 128 partitions of L2 loads took ~6 us) and add their
// group sums in group order. So the f32 summation order differs from a
// sequential loop over p; the terms are the same.
constexpr int kCombineThreads = 256;
constexpr int kCombineUnroll = 8;
static_assert(kMaxHeadDim <= kCombineThreads, "a thread per dim in one group at least");

__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const float* workspace, const int32_t* token_slot, int32_t n_heads,
                   int32_t head_dim, int32_t n_parts, int32_t partition_size, bf16* out,
                   int64_t out_stride) {
  pdl_begin();
  __shared__ float s_w[kCombineThreads];    // weights of one chunk of partitions
  __shared__ float s_acc[kCombineThreads];  // [group][head_dim] group sums
  __shared__ float s_red[kRowWarp];         // block_max / block_sum scratch
  const int32_t t = blockIdx.x;
  const int32_t head = blockIdx.y;
  const int tid = threadIdx.x;
  const int32_t own_slot = token_slot[t];
  const int32_t n_used = partitions_written(own_slot, n_parts, partition_size);
  const float* entry = workspace + workspace_entry(t, head, 0, n_heads, n_parts, head_dim);
  const int64_t entry_floats = head_dim + 2;
  bf16* o = out + t * out_stride + static_cast<int64_t>(head) * head_dim;

  float m = -INFINITY;
  for (int32_t p = tid; p < n_used; p += kCombineThreads) {
    m = fmaxf(m, entry[p * entry_floats + head_dim]);
  }
  m = block_max(m, s_red);
  if (m == -INFINITY) {  // no visible key at all
    for (int d = tid; d < head_dim; d += kCombineThreads) o[d] = __float2bfloat16(0.0f);
    return;
  }
  float l = 0.0f;  // >= 1: the partition holding the max has a term exp2(0)
  for (int32_t p = tid; p < n_used; p += kCombineThreads) {
    const float* e = entry + p * entry_floats;
    const float w = partition_weight(e[head_dim], m);
    if (w != 0.0f) l += e[head_dim + 1] * w;
  }
  const float inv = 1.0f / block_sum(l, s_red);

  // head_dim <= kCombineThreads (kMaxHeadDim): thread tid owns dim d of group g.
  const int groups = kCombineThreads / head_dim;
  const int g = tid / head_dim;
  const int d = tid % head_dim;
  float acc = 0.0f;
  for (int32_t p0 = 0; p0 < n_used; p0 += kCombineThreads) {
    const int32_t n_chunk = min(kCombineThreads, n_used - p0);
    if (tid < n_chunk) {
      s_w[tid] = partition_weight(entry[(p0 + tid) * entry_floats + head_dim], m);
    }
    __syncthreads();
    if (g < groups) {
      for (int32_t p = g; p < n_chunk; p += groups * kCombineUnroll) {
        float v[kCombineUnroll];
#pragma unroll
        for (int u = 0; u < kCombineUnroll; ++u) {  // loads first (an empty entry's is junk)
          const int32_t q = p + u * groups;
          v[u] = q < n_chunk ? entry[(p0 + q) * entry_floats + d] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kCombineUnroll; ++u) {
          const int32_t q = p + u * groups;
          const float w = q < n_chunk ? s_w[q] : 0.0f;
          acc += w != 0.0f ? v[u] * w : 0.0f;
        }
      }
    }
    __syncthreads();  // s_w is restaged by the next chunk
  }
  if (g < groups) s_acc[tid] = acc;
  __syncthreads();
  if (tid < head_dim) {
    float total = 0.0f;
    for (int k = 0; k < groups; ++k) total += s_acc[k * head_dim + tid];
    o[tid] = __float2bfloat16(total * inv);
  }
}

// combine_kernel's work with one warp per (token, head) and kWarpsPerCta of
// them a CTA, for partition counts up to a few dozen (what decode and verify
// steps have: the run kernel's 1024-key partitions at 8K are 8): the CTA-wide
// version spends three barriers and two block reductions on every (token,
// head), which at 64 x 5 verify rows x 28 heads was ~35 us a layer for 37 MB
// of partials (H100, session 32). Lane p takes partitions p, p + 32, ... for
// the max and the sum of weights (shuffles), then every lane adds the
// weighted partials of all partitions for its kDimsPerLane dims in partition
// order (8-byte loads; a partition's weight is the same broadcast load for
// every lane). Same terms as combine_kernel, another f32 summation order.
constexpr int kCombineWarpsPerCta = 8;

template <int kDimsPerLane>
__global__ void __launch_bounds__(kCombineWarpsPerCta * 32)
    combine_warp_kernel(const float* workspace, const int32_t* token_slot, int32_t n_tokens,
                        int32_t n_heads, int32_t n_parts, int32_t partition_size, bf16* out,
                        int64_t out_stride) {
  static_assert(kDimsPerLane % 2 == 0, "dims in pairs (8-byte loads)");
  constexpr int kHeadDim = kDimsPerLane * 32;
  pdl_begin();
  const int lane = threadIdx.x % 32;
  const int64_t pair = int64_t{blockIdx.x} * kCombineWarpsPerCta + threadIdx.x / 32;
  if (pair >= int64_t{n_tokens} * n_heads) return;
  const auto t = static_cast<int32_t>(pair / n_heads);
  const auto head = static_cast<int32_t>(pair % n_heads);
  const int32_t own_slot = token_slot[t];
  const int32_t n_used = partitions_written(own_slot, n_parts, partition_size);
  const float* entry = workspace + workspace_entry(t, head, 0, n_heads, n_parts, kHeadDim);
  constexpr int64_t kEntry = kHeadDim + 2;
  bf16* o = out + t * out_stride + int64_t{head} * kHeadDim + lane * kDimsPerLane;

  float m = -INFINITY;
  for (int32_t p = lane; p < n_used; p += 32) m = fmaxf(m, entry[p * kEntry + kHeadDim]);
  m = warp_max(m);
  if (m == -INFINITY) {  // no visible key at all
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) o[i] = __float2bfloat16(0.0f);
    return;
  }
  float l = 0.0f;  // >= 1: the partition holding the max has a term exp2(0)
  for (int32_t p = lane; p < n_used; p += 32) {
    const float* e = entry + p * kEntry;
    const float w = partition_weight(e[kHeadDim], m);
    if (w != 0.0f) l += e[kHeadDim + 1] * w;
  }
  const float inv = 1.0f / warp_sum(l);

  float acc[kDimsPerLane] = {};
#pragma unroll 4
  for (int32_t p = 0; p < n_used; ++p) {
    const float* e = entry + p * kEntry;
    const float w = partition_weight(e[kHeadDim], m);
    if (w == 0.0f) continue;  // an empty entry's acc is unwritten
#pragma unroll
    for (int i = 0; i < kDimsPerLane; i += 2) {
      const float2 v = *reinterpret_cast<const float2*>(e + lane * kDimsPerLane + i);
      acc[i] += w * v.x;
      acc[i + 1] += w * v.y;
    }
  }
#pragma unroll
  for (int i = 0; i < kDimsPerLane; i += 2) {
    *reinterpret_cast<__nv_bfloat162*>(o + i) =
        __floats2bfloat162_rn(acc[i] * inv, acc[i + 1] * inv);
  }
}

// Merges the partials of every (token, head) into out (combine_warp_kernel
// for head dims 64, 128 and 256 where the output takes bf16 pairs, else
// combine_kernel).
void launch_combine(const PagedAttentionArgs& a, int32_t parts, int32_t partition,
                    cudaStream_t stream) {
  const bool pairs = reinterpret_cast<uintptr_t>(a.out) % 4 == 0 && a.out_stride % 2 == 0;
  const int64_t warps = int64_t{a.n_tokens} * a.n_heads;
  const dim3 warp_grid(
      static_cast<unsigned>((warps + kCombineWarpsPerCta - 1) / kCombineWarpsPerCta));
  const int warp_threads = kCombineWarpsPerCta * 32;
  if (pairs && a.head_dim == 64) {
    launch_pdl(combine_warp_kernel<2>, warp_grid, warp_threads, 0, stream, true, a.workspace,
               a.token_slot, a.n_tokens, a.n_heads, parts, partition, a.out, a.out_stride);
  } else if (pairs && a.head_dim == 128) {
    launch_pdl(combine_warp_kernel<4>, warp_grid, warp_threads, 0, stream, true, a.workspace,
               a.token_slot, a.n_tokens, a.n_heads, parts, partition, a.out, a.out_stride);
  } else if (pairs && a.head_dim == 256) {
    launch_pdl(combine_warp_kernel<8>, warp_grid, warp_threads, 0, stream, true, a.workspace,
               a.token_slot, a.n_tokens, a.n_heads, parts, partition, a.out, a.out_stride);
  } else {
    const dim3 grid(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_heads));
    launch_pdl(combine_kernel, grid, kCombineThreads, 0, stream, true, a.workspace, a.token_slot,
               a.n_heads, a.head_dim, parts, partition, a.out, a.out_stride);
  }
}

template <int kHeadDim>
void launch_paged_attention(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads),
                  static_cast<unsigned>(n_parts));
  launch_pdl(paged_attention_kernel<kHeadDim>, grid, kThreads, 0, stream, a.pdl, a, n_parts);
}

void launch_per_token(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16:
      launch_paged_attention<16>(a, n_parts, stream);
      break;
    case 32:
      launch_paged_attention<32>(a, n_parts, stream);
      break;
    case 64:
      launch_paged_attention<64>(a, n_parts, stream);
      break;
    case 128:
      launch_paged_attention<128>(a, n_parts, stream);
      break;
    case 256:
      launch_paged_attention<256>(a, n_parts, stream);
      break;
    default:
      SS_CHECK_MSG(false, "paged_attention: head_dim must be 16, 32, 64, 128 or 256");
  }
}

}  // namespace

int32_t paged_attention_partition_size(int32_t n_tokens, int32_t n_kv_heads) {
  // ~4 CTAs per SM of a 132-SM part before the partitions grow.
  const int64_t queries = int64_t{n_tokens} * n_kv_heads;
  return queries >= 128 ? kPartitionSize : queries >= 32 ? 128 : 64;
}

size_t paged_attention_workspace_floats(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                        int32_t max_context, int32_t partition_size,
                                        int32_t run_split) {
  const int32_t n_parts = std::max(num_partitions(max_context, partition_size), run_split);
  if (n_parts == 1 || n_tokens <= 0) return 0;  // one partition writes out directly
  return static_cast<size_t>(n_tokens) * static_cast<size_t>(n_heads) *
         static_cast<size_t>(n_parts) * static_cast<size_t>(head_dim + 2);
}

void paged_attention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.n_tokens <= 0) return;
  SS_CHECK_GT(a.n_kv_heads, 0);
  SS_CHECK_GE(a.n_heads, a.n_kv_heads);
  SS_CHECK_EQ(a.n_heads % a.n_kv_heads, 0);
  SS_CHECK_LE(a.n_heads / a.n_kv_heads, kMaxGroup);
  SS_CHECK_GT(a.block_size, 0);
  // K/V rows are read with 16-byte loads.
  SS_CHECK(aligned16(a.k_cache) && aligned16(a.v_cache));
  SS_CHECK(a.partition_size >= 32 && a.partition_size <= kPartitionSize &&
           a.partition_size % 32 == 0);
  const int32_t n_parts = num_partitions(a.max_context, a.partition_size);
  SS_CHECK_LE(n_parts, 65535);  // gridDim.z
  if (n_parts > 1) SS_CHECK(a.workspace != nullptr);
  int32_t partition = a.partition_size;
  int32_t parts = n_parts;
  const bool run_kernel =
      a.token_run != nullptr && run_attention_supported(a.head_dim) && a.partition_size % 64 == 0;
  if (run_kernel && a.run_split > 0) {
    // Run-time split: every CTA writes an entry; the combine reads them all.
    SS_CHECK_MSG(a.run_split >= 2 && a.run_split <= 65535 &&
                     int64_t{a.run_split} * kRunMaxPartition >= a.max_context,
                 "paged_attention: run_split must be in [2, 65535] and cover max_context in "
                 "ranges of at most 1024 keys (run_attention_split)");
    SS_CHECK(a.workspace != nullptr);
    partition = 0;
    parts = a.run_split;
    launch_run_attention(a, parts, stream);
  } else if (run_kernel) {
    PagedAttentionArgs r = a;
    r.run_split = 0;
    r.partition_size = partition = run_attention_partition_size(a);
    const int32_t run_parts = num_partitions(a.max_context, partition);
    launch_run_attention(r, run_parts, stream);
    parts = run_attention_entries(r, run_parts);  // <= n_parts: the workspace fits
  } else {
    launch_per_token(a, n_parts, stream);
  }
  if (parts > 1) launch_combine(a, parts, partition, stream);
}

int32_t paged_attention_runs(const int32_t* token_seq, const int32_t* token_slot, int32_t n_tokens,
                             int32_t group, int32_t* token_run) {
  SS_CHECK(group >= 1 && group <= kRunMaxQueries);
  const int32_t max_rows = kRunMaxQueries / group;
  int32_t longest = 0;
  int32_t head = 0;
  for (int32_t t = 0; t < n_tokens; ++t) {
    const bool extends = t > 0 && token_run[head] < max_rows && token_seq[t] == token_seq[t - 1] &&
                         token_slot[t] == token_slot[t - 1] + 1;
    if (extends) {
      ++token_run[head];
      token_run[t] = 0;
    } else {
      head = t;
      token_run[t] = 1;
    }
    longest = std::max(longest, token_run[head]);
  }
  return longest;
}

}  // namespace specstack::cuda

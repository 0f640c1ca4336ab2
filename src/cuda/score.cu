// SpecPrefill token importance on the device; see score.h for the definition
// and specprefill/scorer.cpp for the CPU twin, whose arithmetic order this
// follows (logit = scale * sequential fp32 dot over d; exp(logit - max);
// pooled = (window sum in tap order) * 1 / (sum * pool_kernel); max over
// heads and layers from 0; importance = sum over steps / n_steps).
//
// A group of up to kMaxGroup scored layers at a time (score_layer_group: as
// many as fit kGroupBytes of logits), three kernels per group:
//   1. score_logits_kernel: logits[g, h, t, j] for every layer g of the group,
//      query head h, step t and token j, a tile of keys per CTA read once
//      through the block table.
//   2. score_row_stats_kernel: per row (g, h, t) its max and 1 / (sum * kernel).
//   3. score_pool_kernel: per (t, j) the max over the group's layers and heads
//      of the pooled probability, folded into running[t, j] with a max.
// then score_mean_kernel averages running over the steps. (One layer at a time
// was 3 launches of ~15 us a layer at a draft's 8K prompt, latency more than
// work: a group gives each launch the group's CTAs.)
//
// Workspace (floats): logits [group, n_heads * n_steps, n_tokens] (row h *
// n_steps + t), stats [group, 2, n_heads * n_steps] (row max, then row inverse
// norm), running [n_steps, n_tokens]. Only a group's logits are held at a time,
// so memory is bounded by kGroupBytes (or one layer), not by n_layers * n_heads.
//
// Non-finite inputs are not errors here (the host checks the importance), but
// they must reach it: the maxima below propagate NaN instead of dropping it
// the way fmaxf would.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/score.h"

namespace specstack::cuda {
namespace {

// Logits kernel: kTokTile tokens per CTA, 8 warps: warp w covers tokens
// (w & 1) * 32 + lane of the tile and query rows (w >> 1) * kRowsPerThread ..
// + kRowsPerThread - 1 of each chunk of kRowChunk rows.
constexpr int kTokTile = 64;
constexpr int kLogitsThreads = 256;
constexpr int kRowsPerThread = 4;
constexpr int kRowChunk = (kLogitsThreads / kTokTile) * kRowsPerThread;  // 16
static_assert(kTokTile == 64 && kLogitsThreads == 256, "warp mapping assumes 2 x 4 warps");

constexpr int kStatsThreads = 512;
constexpr int kStatsLoads = 8;  // per thread in flight (8192 tokens: two rounds)
constexpr int kPoolTile = 256;  // tokens per CTA of the pool kernel (one per thread)
constexpr int kPoolHeads = 8;   // heads' windows per round of the pool kernel
constexpr int kMeanThreads = 256;
constexpr size_t kDefaultSmemBytes = 48 * 1024;
constexpr int kMaxGroup = 8;  // scored layers per launch, at most
// Their logits, at most (unless one layer). 32 MB: the 0.5B draft's 24 layers
// at 8K in 3 launches (1.14 -> 0.66 ms, H200), 2 layers a launch at 32K (+2%);
// 16 MB (1 layer at 32K) measured 9% slower there and 0.68 ms at 8K.
constexpr size_t kGroupBytes = size_t(32) << 20;

// The scored layers of one launch: ids (into the queries' layers), K caches
// and whether each cache takes 16-byte loads.
struct LayerGroup {
  int n = 0;
  int layer[kMaxGroup] = {};
  const bf16* k_cache[kMaxGroup] = {};
  bool vec16[kMaxGroup] = {};
};

// Layers per group for a problem: as many as fit kGroupBytes of logits, 1..kMaxGroup.
int score_layer_group(int32_t n_steps, int32_t n_heads, int32_t n_tokens) {
  const size_t layer_bytes = static_cast<size_t>(n_heads) * static_cast<size_t>(n_steps) *
                             static_cast<size_t>(n_tokens) * sizeof(float);
  return static_cast<int>(
      std::clamp<size_t>(kGroupBytes / std::max<size_t>(layer_bytes, 1), 1, kMaxGroup));
}

// max(a, b) that returns NaN when either is NaN.
__device__ __forceinline__ float nan_max(float a, float b) {
  return (b > a || b != b) ? b : a;
}

// Padded head_dim so query rows can be read as float4.
__host__ __device__ inline int padded_dim(int head_dim) {
  return (head_dim + 3) / 4 * 4;
}

// Query rows the logits kernel keeps in shared memory: every row of the CTA
// (group * n_steps, rounded up to kRowChunk) when that fits in the default
// 48 KB beside the key tile, so they are loaded in one round (a CTA here is a
// chain of latencies more than of FMAs: ncu, H100, 0.5B shape at 8K, 18 us a
// layer with a load round per 16 rows); else kRowChunk rows at a time.
int logits_q_rows(int head_dim, int n_rows) {
  const int dp = padded_dim(head_dim);
  const int all = (n_rows + kRowChunk - 1) / kRowChunk * kRowChunk;
  const size_t bytes =
      (static_cast<size_t>(all) * dp + static_cast<size_t>(kTokTile) * (dp + 1)) * sizeof(float);
  return bytes <= kDefaultSmemBytes ? all : kRowChunk;
}

size_t logits_smem_bytes(int head_dim, int q_rows) {
  const int dp = padded_dim(head_dim);
  // q_s [q_rows, dp] then k_s [kTokTile, dp + 1] (odd stride: lanes reading
  // different tokens at the same d hit different banks).
  return (static_cast<size_t>(q_rows) * dp + static_cast<size_t>(kTokTile) * (dp + 1)) *
         sizeof(float);
}

// logits [group.n, n_heads * n_steps, n_tokens] f32. Grid (ceil(n_tokens /
// kTokTile), n_kv_heads, group.n); block kLogitsThreads; dynamic smem
// logits_smem_bytes. queries [n_steps, n_layers, n_heads * head_dim] f32; each
// group.k_cache [n_blocks, block_size, n_kv_heads, head_dim] bf16; block_table
// [>= ceil(slot_end / block_size)] i32. vec16: head_dim % 8 == 0 and that
// k_cache 16-byte aligned.
__global__ void __launch_bounds__(kLogitsThreads)
    score_logits_kernel(const float* __restrict__ queries, int n_steps, int n_layers,
                        const __grid_constant__ LayerGroup group_layers, int n_heads,
                        int n_kv_heads, int head_dim, const int32_t* __restrict__ block_table,
                        int block_size, int slot_begin, int n_tokens, float scale, int q_rows,
                        float* __restrict__ logits) {
  pdl_begin();
  const int layer = group_layers.layer[blockIdx.z];
  const bf16* __restrict__ k_cache = group_layers.k_cache[blockIdx.z];
  const bool vec16 = group_layers.vec16[blockIdx.z];
  logits += static_cast<int64_t>(blockIdx.z) * n_heads * n_steps * n_tokens;
  extern __shared__ __align__(16) float smem[];
  const int dp = padded_dim(head_dim);
  const int ks_stride = dp + 1;
  float* q_s = smem;                                     // [q_rows, dp]
  float* k_s = smem + static_cast<size_t>(q_rows) * dp;  // [kTokTile, dp + 1]

  const int kv_head = blockIdx.y;
  const int tile_start = blockIdx.x * kTokTile;
  const int group = n_heads / n_kv_heads;
  const int n_rows = group * n_steps;  // row r = step * group + head in group
  const int tid = threadIdx.x;

  // Key tile into smem as f32; tokens past n_tokens and columns d >= head_dim
  // are zero (they are multiplied but never written out).
  auto key_row = [&](int token) {
    const int slot = slot_begin + token;
    const int64_t block = block_table[slot / block_size];
    const int64_t index = block * block_size + slot % block_size;
    return k_cache + (index * n_kv_heads + kv_head) * head_dim;
  };
  if (vec16) {
    // dp == head_dim here; 8 bf16 (16 bytes) per load.
    const int chunks = head_dim / 8;
    for (int i = tid; i < kTokTile * chunks; i += kLogitsThreads) {
      const int jj = i / chunks;
      const int c = i % chunks;
      const int token = tile_start + jj;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (token < n_tokens) {
        const uint4 raw = *reinterpret_cast<const uint4*>(key_row(token) + c * 8);
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(pairs[e]);
          v[2 * e] = f.x;
          v[2 * e + 1] = f.y;
        }
      }
      float* dst = k_s + jj * ks_stride + c * 8;
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = v[e];
    }
  } else {
    for (int i = tid; i < kTokTile * dp; i += kLogitsThreads) {
      const int jj = i / dp;
      const int d = i % dp;
      const int token = tile_start + jj;
      k_s[jj * ks_stride + d] =
          (token < n_tokens && d < head_dim) ? __bfloat162float(key_row(token)[d]) : 0.0f;
    }
  }

  const int warp = tid / 32;
  const int lane = tid % 32;
  const int jj = (warp & 1) * 32 + lane;              // token in tile
  const int row_base = (warp >> 1) * kRowsPerThread;  // first row in chunk
  const int token = tile_start + jj;
  const float* k_row = k_s + jj * ks_stride;
  const int dp4 = dp / 4;

  for (int chunk = 0; chunk < n_rows; chunk += kRowChunk) {
    const int q_first = chunk / q_rows * q_rows;  // first row q_s holds for this chunk
    if (chunk == q_first) {  // (re)load: every chunk, or once when q_s holds all rows
      // The previous chunk's reads of q_s are done before it is overwritten.
      __syncthreads();
      for (int i = tid; i < q_rows * dp; i += kLogitsThreads) {
        const int rr = i / dp;
        const int d = i % dp;
        const int r = q_first + rr;
        float v = 0.0f;
        if (r < n_rows && d < head_dim) {
          const int t = r / group;
          const int h = kv_head * group + r % group;
          v = queries[(static_cast<int64_t>(t) * n_layers + layer) * n_heads * head_dim +
                      static_cast<int64_t>(h) * head_dim + d];
        }
        q_s[i] = v;  // i == rr * dp + d
      }
      // Orders both the q_s writes and (first chunk) the k_s writes above.
      __syncthreads();
    }

    float acc[kRowsPerThread] = {};
    const float4* q4 = reinterpret_cast<const float4*>(q_s + (chunk - q_first + row_base) * dp);
    for (int d4 = 0; d4 < dp4; ++d4) {
      const float k0 = k_row[4 * d4];
      const float k1 = k_row[4 * d4 + 1];
      const float k2 = k_row[4 * d4 + 2];
      const float k3 = k_row[4 * d4 + 3];
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        const float4 q = q4[k * dp4 + d4];  // same address across the warp: broadcast
        // Sequential in d, like the CPU twin.
        acc[k] = fmaf(q.x, k0, acc[k]);
        acc[k] = fmaf(q.y, k1, acc[k]);
        acc[k] = fmaf(q.z, k2, acc[k]);
        acc[k] = fmaf(q.w, k3, acc[k]);
      }
    }
    if (token < n_tokens) {
#pragma unroll
      for (int k = 0; k < kRowsPerThread; ++k) {
        const int r = chunk + row_base + k;
        if (r < n_rows) {
          const int t = r / group;
          const int h = kv_head * group + r % group;
          logits[(static_cast<int64_t>(h) * n_steps + t) * n_tokens + token] = acc[k] * scale;
        }
      }
    }
  }
}

// Online (max, sum of exp(x - max)) pair; sum == 0 means empty.
struct MaxSum {
  float m;
  float s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  if (b.s == 0.0f) return a;
  if (a.s == 0.0f) return b;
  // NaN maxima (non-finite logits) make the sum NaN through the exp below.
  if (b.m > a.m) {
    const MaxSum tmp = a;
    a = b;
    b = tmp;
  }
  return {a.m, a.s + b.s * expf(b.m - a.m)};
}

// Per layer g of the group: stats[g, 0, row] = max of the row, stats[g, 1,
// row] = 1 / (sum_j exp(x_j - max) * pool_kernel). logits [group, n_rows,
// n_tokens]. Grid (n_rows, group); block kStatsThreads.
__global__ void __launch_bounds__(kStatsThreads)
    score_row_stats_kernel(const float* __restrict__ logits, int n_rows, int n_tokens,
                           int pool_kernel, float* __restrict__ stats) {
  pdl_begin();
  __shared__ MaxSum warp_part[kStatsThreads / 32];
  const int row = blockIdx.x;
  const float* x = logits + (static_cast<int64_t>(blockIdx.y) * n_rows + row) * n_tokens;
  stats += static_cast<int64_t>(blockIdx.y) * 2 * n_rows;

  MaxSum acc{-INFINITY, 0.0f};
  // kStatsLoads loads per thread issued before any is used (one memory round
  // per kStatsLoads elements instead of one per element), folded in the same
  // order as one element at a time.
  for (int base = threadIdx.x; base < n_tokens; base += kStatsThreads * kStatsLoads) {
    float v[kStatsLoads];
#pragma unroll
    for (int u = 0; u < kStatsLoads; ++u) {
      const int j = base + u * kStatsThreads;
      v[u] = j < n_tokens ? x[j] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kStatsLoads; ++u) {
      if (base + u * kStatsThreads >= n_tokens) break;
      if (acc.s == 0.0f || v[u] > acc.m) {
        // First element, or a new maximum: rescale the sum (0 when empty).
        acc.s = (acc.s == 0.0f ? 0.0f : acc.s * expf(acc.m - v[u])) + 1.0f;
        acc.m = v[u];
      } else {
        acc.s += expf(v[u] - acc.m);  // NaN v lands here and poisons the sum
      }
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other;
    other.m = __shfl_xor_sync(0xffffffffu, acc.m, offset);
    other.s = __shfl_xor_sync(0xffffffffu, acc.s, offset);
    acc = merge(acc, other);
  }
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (lane == 0) warp_part[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kStatsThreads / 32 ? warp_part[lane] : MaxSum{-INFINITY, 0.0f};
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum other;
      other.m = __shfl_xor_sync(0xffffffffu, acc.m, offset);
      other.s = __shfl_xor_sync(0xffffffffu, acc.s, offset);
      acc = merge(acc, other);
    }
    if (lane == 0) {
      stats[row] = acc.m;
      stats[n_rows + row] = 1.0f / (acc.s * static_cast<float>(pool_kernel));
    }
  }
}

// running[t, j] = max(running[t, j], max_{g, h} pooled[g, h, t, j]) with
// pooled = (sum over the pool_kernel window of exp(logit - max), zero outside
// [0, n_tokens)) * inverse norm, over the group's n_group layers. logits
// [n_group, n_heads * n_steps, n_tokens], stats as above, running [n_steps,
// n_tokens]. Grid (ceil(n_tokens / kPoolTile), n_steps); block kPoolTile;
// dynamic smem round_heads * (kPoolTile + pool_kernel - 1) floats (round_heads
// <= kPoolHeads heads' windows a round). The maxima are exact, so the order
// over layers and heads does not matter.
__global__ void __launch_bounds__(kPoolTile)
    score_pool_kernel(const float* __restrict__ logits, const float* __restrict__ stats,
                      int n_group, int n_heads, int n_steps, int n_tokens, int pool_kernel,
                      int round_heads, float* __restrict__ running) {
  pdl_begin();
  extern __shared__ float
      window_s[];  // [kPoolTile + pool_kernel - 1]: tokens from tile_start - pad
  const int t = blockIdx.y;
  const int tile_start = blockIdx.x * kPoolTile;
  const int pad = pool_kernel / 2;
  const int n_window = kPoolTile + pool_kernel - 1;
  const int n_rows = n_heads * n_steps;
  const int tid = threadIdx.x;
  const int j = tile_start + tid;

  float best = 0.0f;  // every pooled value is >= 0
  for (int g = 0; g < n_group; ++g) {
    const float* const layer_logits = logits + static_cast<int64_t>(g) * n_rows * n_tokens;
    const float* const layer_stats = stats + static_cast<int64_t>(g) * 2 * n_rows;
    // kPoolHeads heads' windows per round, their loads in flight together (a
    // round per head was 14 dependent rounds on the 0.5B: 15 us a layer).
    for (int h0 = 0; h0 < n_heads; h0 += round_heads) {
      const int heads = min(round_heads, n_heads - h0);
      for (int i = tid; i < heads * n_window; i += kPoolTile) {
        const int hh = i / n_window;
        const int w = i - hh * n_window;
        const int row = (h0 + hh) * n_steps + t;
        const int token = tile_start - pad + w;
        window_s[i] = (token >= 0 && token < n_tokens)
                          ? expf(layer_logits[static_cast<int64_t>(row) * n_tokens + token] -
                                 layer_stats[row])
                          : 0.0f;
      }
      __syncthreads();
      for (int hh = 0; hh < heads; ++hh) {
        // Token j's window: tokens j - pad .. j + pad = this head's window_s[tid .. + pool_kernel).
        const float* win = window_s + hh * n_window;
        float sum = 0.0f;
        for (int k = 0; k < pool_kernel; ++k) sum += win[tid + k];
        best = nan_max(best, sum * layer_stats[n_rows + (h0 + hh) * n_steps + t]);
      }
      // Every thread is done reading before the next round overwrites window_s.
      __syncthreads();
    }
  }
  if (j < n_tokens) {
    float* r = running + static_cast<int64_t>(t) * n_tokens + j;
    *r = nan_max(*r, best);
  }
}

// importance[j] = sum_t running[t, j] / n_steps. running [n_steps, n_tokens].
__global__ void score_mean_kernel(const float* __restrict__ running, int n_steps, int n_tokens,
                                  float* __restrict__ importance) {
  pdl_begin();
  const int j = blockIdx.x * kMeanThreads + threadIdx.x;
  if (j >= n_tokens) return;
  float sum = 0.0f;
  for (int t = 0; t < n_steps; ++t) sum += running[static_cast<int64_t>(t) * n_tokens + j];
  importance[j] = sum / static_cast<float>(n_steps);
}

}  // namespace

size_t score_workspace_floats(int32_t n_steps, int32_t n_heads, int32_t n_tokens) {
  const size_t rows = static_cast<size_t>(n_heads) * static_cast<size_t>(n_steps);
  const size_t tokens = static_cast<size_t>(n_tokens);
  const size_t group = static_cast<size_t>(score_layer_group(n_steps, n_heads, n_tokens));
  return group * (rows * tokens + 2 * rows) + static_cast<size_t>(n_steps) * tokens;
}

void score_tokens(const ScoreArgs& args, cudaStream_t stream) {
  const int n_tokens = args.slot_end - args.slot_begin;
  SS_CHECK(args.slot_begin >= 0 && n_tokens >= 0);
  if (n_tokens == 0) return;
  SS_CHECK(args.n_steps > 0 && args.n_heads > 0 && args.n_kv_heads > 0 && args.head_dim > 0);
  SS_CHECK(args.n_heads % args.n_kv_heads == 0);
  SS_CHECK(args.block_size > 0);
  SS_CHECK(args.pool_kernel >= 1 && args.pool_kernel % 2 == 1);
  SS_CHECK(args.queries != nullptr && args.block_table != nullptr);
  SS_CHECK(args.importance != nullptr && args.workspace != nullptr);
  SS_CHECK(args.n_scored == 0 || (args.scored_layers != nullptr && args.k_caches != nullptr));

  const int n_rows = args.n_heads * args.n_steps;
  const int max_group = score_layer_group(args.n_steps, args.n_heads, n_tokens);
  float* logits = args.workspace;  // [max_group, n_rows, n_tokens]
  float* stats =
      logits + static_cast<size_t>(max_group) * n_rows * n_tokens;       // [max_group, 2, n_rows]
  float* running = stats + static_cast<size_t>(max_group) * 2 * n_rows;  // [n_steps, n_tokens]
  const float scale = 1.0f / std::sqrt(static_cast<float>(args.head_dim));

  SS_CUDA_CHECK(cudaMemsetAsync(running, 0,
                                static_cast<size_t>(args.n_steps) * n_tokens * sizeof(float),
                                stream));  // 0.0f: below every pooled value

  const int q_rows = logits_q_rows(args.head_dim, n_rows / args.n_kv_heads);
  const size_t logits_smem = logits_smem_bytes(args.head_dim, q_rows);
  if (logits_smem > kDefaultSmemBytes) {
    // head_dim 256 needs ~82 KB; opt in above the 48 KB default.
    SS_CUDA_CHECK(cudaFuncSetAttribute(score_logits_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(logits_smem)));
  }
  const size_t window_bytes = static_cast<size_t>(kPoolTile + args.pool_kernel - 1) * sizeof(float);
  SS_CHECK(window_bytes <= kDefaultSmemBytes);
  const int round_heads =
      static_cast<int>(std::min<size_t>(kPoolHeads, kDefaultSmemBytes / window_bytes));
  const size_t pool_smem = static_cast<size_t>(round_heads) * window_bytes;

  const dim3 pool_grid((n_tokens + kPoolTile - 1) / kPoolTile, args.n_steps);
  for (int first = 0; first < args.n_scored; first += max_group) {
    LayerGroup group;
    group.n = std::min(max_group, args.n_scored - first);
    for (int g = 0; g < group.n; ++g) {
      const int layer = args.scored_layers[first + g];
      SS_CHECK(layer >= 0 && layer < args.n_layers);
      const bf16* k_cache = args.k_caches[layer];
      SS_CHECK(k_cache != nullptr);
      group.layer[g] = layer;
      group.k_cache[g] = k_cache;
      group.vec16[g] = args.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(k_cache) % 16 == 0;
    }
    const dim3 logits_grid((n_tokens + kTokTile - 1) / kTokTile, args.n_kv_heads, group.n);

    // Programmatic launches (cuda/pdl.h): each kernel's launch and block
    // scheduling overlap the previous one's tail; the first follows the
    // memset, with which no programmatic edge can be formed.
    launch_pdl(score_logits_kernel, logits_grid, dim3(kLogitsThreads), logits_smem, stream,
               first > 0, args.queries, args.n_steps, args.n_layers, group, args.n_heads,
               args.n_kv_heads, args.head_dim, args.block_table, args.block_size, args.slot_begin,
               n_tokens, scale, q_rows, logits);
    launch_pdl(score_row_stats_kernel, dim3(n_rows, group.n), dim3(kStatsThreads), 0, stream, true,
               static_cast<const float*>(logits), n_rows, n_tokens, args.pool_kernel, stats);
    launch_pdl(score_pool_kernel, pool_grid, dim3(kPoolTile), pool_smem, stream, true,
               static_cast<const float*>(logits), static_cast<const float*>(stats), group.n,
               args.n_heads, args.n_steps, n_tokens, args.pool_kernel, round_heads, running);
  }
  launch_pdl(score_mean_kernel, dim3((n_tokens + kMeanThreads - 1) / kMeanThreads),
             dim3(kMeanThreads), 0, stream, args.n_scored > 0, static_cast<const float*>(running),
             args.n_steps, n_tokens, args.importance);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

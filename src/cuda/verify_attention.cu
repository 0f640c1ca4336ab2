// The run kernel of verify_attention.h. Its partition loop (slot tables,
// pipeline fill, empty partitions) is shared by two maths: the Hopper one
// (WgmmaRun, cuda/verify_attention_wgmma.cuh: what an sm_90a device runs) and
// the mma.sync one below (MmaRun: other GPUs, and tests / benchmarks that pin
// it). The mma.sync math, FlashAttention-2 style. One CTA per
// (run, kv head, partition), 128 threads (4 warps), ~110 KB of dynamic shared
// memory at head_dim 128 (2 CTAs per SM):
//  1. the partition's slots are resolved once into shared memory (keys the
//     window hides from the run's FIRST row are hidden from all its rows and
//     are not loaded);
//  2. the partition is walked in tiles of kTile keys through a kStages-deep
//     cp.async pipeline (K and V straight from global to shared memory, no
//     register staging; keys not loaded are zero-filled), one barrier a tile;
//  3. warp w owns M tile (w % kMTiles) of the run's rows x group heads query
//     vectors (16 per tile; Q as mma A fragments in registers for the whole
//     partition) and key slice (w / kMTiles) of every tile: one M tile (a
//     decode row, 7 query vectors) gives each warp 16 keys of a tile, 3-4 M
//     tiles (a verify run of 5 rows x 7 heads) give each warp the whole tile;
//  4. S = Q K^T and O += P V on the tensor cores (mma.m16n8k16, bf16 in,
//     fp32 accumulate) with S, P and O in REGISTERS: the S accumulator of two
//     8-key n tiles is the A fragment of the next 16-key PV step; K through
//     ldmatrix, V through ldmatrix.trans;
//  5. online softmax per query row in registers (quad shuffles; each lane
//     keeps a partial row sum, reduced once at the end), P rounded to bf16
//     for PV as flash attention does, masks per (row, key) (causal by the
//     row's own slot, window by its position) skipped on tiles every row sees
//     whole;
//  6. the warps of one M tile merge their key slices through shared memory;
//     the result is written like paged_attention_kernel's: bf16 out with one
//     partition, else (acc, max, sum) partials that combine_kernel merges.
// The version before (S/P and O in fp32 shared memory, loads through
// registers one sub-tile ahead, 8 warps, 4 barriers a sub-tile) streamed the
// KV at ~0.9 TB/s at batch 32 x 16K.
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/ptx_primitives.cuh"
#include "cuda/run_attention_common.cuh"
#include "cuda/sm90a.h"
#include "cuda/verify_attention.h"
#include "cuda/verify_attention_wgmma.cuh"

namespace specstack::cuda {
namespace {

using namespace run_kernel;  // kThreads, kTile, Cta, ... (cuda/run_attention_common.cuh)
using namespace ptx;         // cp.async, ldmatrix, mma.sync, pack_bf16 (cuda/ptx_primitives.cuh)

constexpr int kStages = 3;  // tiles in flight: 2 loading while 1 is computed

static_assert(kRunMaxQueries == kWarps * 16, "one M tile per warp at most");
static_assert(kRunMaxPartition % kTile == 0, "partitions are whole tiles");

// Shared memory layout for one head dim (K/V rows padded by 16 bytes so the
// 8 rows of an ldmatrix hit distinct banks; every array 16-byte aligned).
template <int kHeadDim>
struct Smem {
  static constexpr int kKvStride = kHeadDim + 8;  // bf16 per K / V row
  static constexpr int kOStride = kHeadDim + 4;   // f32 per row of the merge scratch
  static constexpr size_t kStage = size_t{kTile} * kKvStride * 2;  // bytes of one K (V) tile
  static constexpr size_t kK = 0;                                  // [kStages][kTile][kKvStride]
  static constexpr size_t kV = kK + kStages * kStage;              // [kStages][kTile][kKvStride]
  static constexpr size_t kFlat = kV + kStages * kStage;           // int32 [kRunMaxPartition]
  static constexpr size_t kKpos = kFlat + kRunMaxPartition * 4;    // int32 [kRunMaxPartition]
  static constexpr size_t kBytes = kKpos + kRunMaxPartition * 4;
  // After the loop the K buffers hold the per-warp merge scratch:
  // O [kWarps][16][kOStride] f32, then max and sum [kWarps][16] f32.
  static constexpr size_t kMergeO = 0;
  static constexpr size_t kMergeMax = kMergeO + size_t{kWarps} * 16 * kOStride * 4;
  static constexpr size_t kMergeSum = kMergeMax + kWarps * 16 * 4;
  static_assert(kMergeSum + kWarps * 16 * 4 <= kV, "merge scratch fits the K buffers");
};

// Max / sum over the 4 lanes of a quad (the lanes holding one MMA row).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Issues the cp.async loads of tile `tile` into stage buffer `buf`.
template <int kHeadDim>
__device__ __forceinline__ void load_tile(const PagedAttentionArgs& a, const Cta& c,
                                          unsigned char* smem, int32_t tile, int buf) {
  using L = Smem<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  const auto* s_flat = reinterpret_cast<const int32_t*>(smem + L::kFlat);
  auto* dk = reinterpret_cast<bf16*>(smem + L::kK + buf * L::kStage);
  auto* dv = reinterpret_cast<bf16*>(smem + L::kV + buf * L::kStage);
  const int64_t kv_row = static_cast<int64_t>(a.n_kv_heads) * kHeadDim;
  const bf16* k_head = a.k_cache + static_cast<int64_t>(c.kvh) * kHeadDim;
  const bf16* v_head = a.v_cache + static_cast<int64_t>(c.kvh) * kHeadDim;
  static_assert(kTile * kChunks % kThreads == 0, "whole copies per thread");
#pragma unroll
  for (int u = 0; u < kTile * kChunks / kThreads; ++u) {
    const int i = threadIdx.x + u * kThreads;
    const int key = i / kChunks;
    const int col = (i % kChunks) * 8;
    const int32_t flat = s_flat[tile * kTile + key];
    const int64_t off = (flat >= 0 ? flat * kv_row : 0) + col;
    const int bytes = flat >= 0 ? 16 : 0;  // 0: zero-filled, nothing read
    cp_async_16(dk + key * L::kKvStride + col, k_head + off, bytes);
    cp_async_16(dv + key * L::kKvStride + col, v_head + off, bytes);
  }
}

// A CTA's running softmax over the partitions it takes (registers), per
// lane: the Q fragments and visibility limits of its warp's two query rows
// (M tile mi = warp % M tiles: rows 16 mi + gr, + 8), the O accumulators of
// its key slice, the running max (log2 domain) and its share of the sum.
template <int kHeadDim>
struct MmaState {
  uint32_t qf[kHeadDim / 16][4];
  int32_t row_slot[2], row_lim[2];
  float o[kHeadDim / 8][4];
  float row_max[2], row_sum[2];
};

// Before the CTA's first partition: Q and an empty softmax, for kKeyGroups
// warps per M tile.
template <int kHeadDim, int kKeyGroups>
__device__ __forceinline__ void mma_begin(const PagedAttentionArgs& a, const Cta& c,
                                          MmaState<kHeadDim>& st) {
  constexpr int kMTiles = kWarps / kKeyGroups;
  load_query_fragments<kHeadDim>(a, c, ((threadIdx.x >> 5) % kMTiles) * 16, st.row_slot, st.row_lim,
                                 st.qf);
#pragma unroll
  for (int d = 0; d < kHeadDim / 8; ++d) st.o[d][0] = st.o[d][1] = st.o[d][2] = st.o[d][3] = 0.0f;
  st.row_max[0] = st.row_max[1] = -INFINITY;
  st.row_sum[0] = st.row_sum[1] = 0.0f;
}

// A partition's tiles (the first kStages - 1 already issued by the caller)
// into the state, for kKeyGroups warps per M tile; drains the copies.
template <int kHeadDim, int kKeyGroups>
__device__ __forceinline__ void mma_tiles(const PagedAttentionArgs& a, const Cta& c,
                                          unsigned char* smem, MmaState<kHeadDim>& st) {
  using L = Smem<kHeadDim>;
  constexpr int kKv = L::kKvStride;
  constexpr int kMTiles = kWarps / kKeyGroups;  // M tiles the CTA covers
  constexpr int kSlice = kTile / kKeyGroups;    // keys of a tile per warp: 64, 32 or 16
  constexpr int kNt = kSlice / 8;               // 8-key S tiles per warp
  constexpr int kKs = kHeadDim / 16;            // 16-dim k steps of QK
  constexpr int kDt = kHeadDim / 8;             // 8-dim O tiles
  static_assert(kSlice % 16 == 0, "whole PV k steps");
  const auto* s_flat = reinterpret_cast<const int32_t*>(smem + L::kFlat);
  const auto* s_kpos = reinterpret_cast<const int32_t*>(smem + L::kKpos);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int mi = warp % kMTiles;
  const int kj = warp / kMTiles;
  const int tq = lane & 3;
  const bool active = mi * 16 < c.n_q;
  const float q_scale = a.scale * kLog2e;
  // Tiles every row sees whole: before the first row's own slot, no window.
  const int32_t first_slot = a.token_slot[c.t0];
  float(&o)[kDt][4] = st.o;
  float(&row_max)[2] = st.row_max;
  float(&row_sum)[2] = st.row_sum;

  for (int32_t tile = 0; tile < c.n_tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile's data visible; the buffer refilled below is free
    if (tile + kStages - 1 < c.n_tiles) {
      load_tile<kHeadDim>(a, c, smem, tile + kStages - 1, (tile + kStages - 1) % kStages);
    }
    cp_async_commit();  // (empty groups keep the wait count uniform)
    if (!active) continue;

    const int buf = tile % kStages;
    const int32_t key0 = tile * kTile + kj * kSlice;  // partition index of the slice's first key
    const bf16* ks_base =
        reinterpret_cast<const bf16*>(smem + L::kK + buf * L::kStage) + kj * kSlice * kKv;
    const bf16* vs_base =
        reinterpret_cast<const bf16*>(smem + L::kV + buf * L::kStage) + kj * kSlice * kKv;

    // S = Q K^T: B fragments of two k steps per ldmatrix (rows = keys).
    float s[kNt][4];
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const bf16* kb = ks_base + (nt * 8 + (lane & 7)) * kKv + (lane >> 3) * 8;
#pragma unroll
      for (int ks = 0; ks < kKs; ks += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_u32(kb + ks * 16));
        mma_bf16(s[nt], st.qf[ks], b[0], b[1]);
        mma_bf16(s[nt], st.qf[ks + 1], b[2], b[3]);
      }
    }

    // Scale and mask. Element e of s[nt]: row h = e / 2, key nt*8 + tq*2 + e%2.
    const bool whole = a.sliding_window <= 0 && tile * kTile + kTile <= c.n_keys &&
                       c.start + tile * kTile + kTile - 1 <= first_slot;
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * q_scale;
        if (!whole) {
          const int32_t key = key0 + nt * 8 + tq * 2 + (e & 1);
          const int h = e >> 1;
          const bool visible = key < c.n_keys && s_flat[key] >= 0 &&
                               c.start + key <= st.row_slot[h] && s_kpos[key] > st.row_lim[h];
          if (!visible) v = -INFINITY;
        }
        s[nt][e] = v;
      }
    }

    // Online softmax per row (the 4 lanes of a quad hold one row's keys).
    float rescale[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
      const float m_new = fmaxf(row_max[h], quad_max(mx));
      rescale[h] = row_max[h] == -INFINITY ? 0.0f : exp2f(row_max[h] - m_new);
      row_max[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float p = m_new == -INFINITY ? 0.0f : exp2f(s[nt][e] - m_new);
          s[nt][e] = p;
          sum += p;
        }
      }
      row_sum[h] = row_sum[h] * rescale[h] + sum;
    }
#pragma unroll
    for (int d = 0; d < kDt; ++d) {
      o[d][0] *= rescale[0];
      o[d][1] *= rescale[0];
      o[d][2] *= rescale[1];
      o[d][3] *= rescale[1];
    }

    // O += P V: the S accumulators of 8-key tiles 2j and 2j + 1 are the A
    // fragment of 16-key step j; V's B fragments of two 8-dim tiles per
    // ldmatrix.trans (rows = keys).
#pragma unroll
    for (int j = 0; j < kSlice / 16; ++j) {
      const uint32_t pa[4] = {
          pack_bf16(s[2 * j][0], s[2 * j][1]), pack_bf16(s[2 * j][2], s[2 * j][3]),
          pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]), pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3])};
      const bf16* vb =
          vs_base + (j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * kKv + (lane >> 4) * 8;
#pragma unroll
      for (int d = 0; d < kDt; d += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_u32(vb + d * 8));
        mma_bf16(o[d], pa, b[0], b[1]);
        mma_bf16(o[d + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
}

// After the CTA's last partition: merges the key slices of each row through
// shared memory (the K buffers: every copy is drained) and writes bf16 out
// when the CTA is the only entry (n_entries 1: it saw every key), else its
// unnormalised partial, max and sum as entry `entry` of n_entries.
template <int kHeadDim, int kKeyGroups>
__device__ __forceinline__ void mma_finish(const PagedAttentionArgs& a, const Cta& c,
                                           unsigned char* smem, const MmaState<kHeadDim>& st,
                                           int32_t entry, int32_t n_entries) {
  using L = Smem<kHeadDim>;
  constexpr int kMTiles = kWarps / kKeyGroups;
  constexpr int kDt = kHeadDim / 8;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int gr = lane >> 2;
  const int tq = lane & 3;
  const bool active = (warp % kMTiles) * 16 < c.n_q;
  const float(&o)[kDt][4] = st.o;
  __syncthreads();  // every warp is done with the K buffers: the merge scratch

  // Each warp's partial (O unnormalised, max, sum) per row to shared memory.
  auto* m_o = reinterpret_cast<float*>(smem + L::kMergeO);  // [kWarps][16][kOStride]
  auto* m_max = reinterpret_cast<float*>(smem + L::kMergeMax);
  auto* m_sum = reinterpret_cast<float*>(smem + L::kMergeSum);
  if (active) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = gr + h * 8;
      float* orow = m_o + (warp * 16 + r) * L::kOStride + tq * 2;
#pragma unroll
      for (int d = 0; d < kDt; ++d) {
        orow[d * 8] = o[d][2 * h];
        orow[d * 8 + 1] = o[d][2 * h + 1];
      }
      const float l = quad_sum(st.row_sum[h]);
      if (tq == 0) {
        m_max[warp * 16 + r] = st.row_max[h];
        m_sum[warp * 16 + r] = l;
      }
    }
  }
  __syncthreads();

  // Merge the key slices of each row and write out / the partials.
  for (int i = threadIdx.x; i < c.n_q * kHeadDim; i += kThreads) {
    const int m = i / kHeadDim;
    const int d = i % kHeadDim;
    const int tm = m / 16;
    const int r = m % 16;
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < kKeyGroups; ++k) mx = fmaxf(mx, m_max[(k * kMTiles + tm) * 16 + r]);
    float acc = 0.0f, l = 0.0f;
#pragma unroll
    for (int k = 0; k < kKeyGroups; ++k) {
      const int w = k * kMTiles + tm;
      const float mk = m_max[w * 16 + r];
      const float f = mk == -INFINITY ? 0.0f : exp2f(mk - mx);
      acc += m_o[(w * 16 + r) * L::kOStride + d] * f;
      l += m_sum[w * 16 + r] * f;
    }
    const int32_t t = c.t0 + m / c.g;
    const int32_t head = c.kvh * c.g + m % c.g;
    if (n_entries == 1) {
      a.out[t * a.out_stride + static_cast<int64_t>(head) * kHeadDim + d] =
          __float2bfloat16(l > 0.0f ? acc / l : 0.0f);
    } else {
      float* w = a.workspace + workspace_entry(t, head, entry, a.n_heads, n_entries, kHeadDim);
      w[d] = acc;
      if (d == 0) {
        w[kHeadDim] = mx;
        w[kHeadDim + 1] = l;
      }
    }
  }
}

// The mma.sync math (any sm_80+ image) in the shape the kernel below takes
// (WgmmaRun, cuda/verify_attention_wgmma.cuh, is the other): shared-memory
// layout, a tile's loads, a partition's tiles and write-out.
template <int kHeadDim>
struct MmaRun {
  static constexpr int kStages = ::specstack::cuda::kStages;
  static constexpr size_t kAlign = 16;
  static constexpr size_t kFlat = Smem<kHeadDim>::kFlat;
  static constexpr size_t kKpos = Smem<kHeadDim>::kKpos;
  static constexpr size_t kBytes = Smem<kHeadDim>::kBytes;
  static __device__ __forceinline__ void load_tile(const PagedAttentionArgs& a, const Cta& c,
                                                   unsigned char* smem, int32_t tile, int buf) {
    ::specstack::cuda::load_tile<kHeadDim>(a, c, smem, tile, buf);
  }
  // kKeyGroups warps share an M tile: 4 for one tile of query vectors, 2 for
  // two, 1 for three or four (uniform per CTA: n_q is the run's).
  using State = MmaState<kHeadDim>;
  static __device__ __forceinline__ void begin(const PagedAttentionArgs& a, const Cta& c,
                                               State& st) {
    const int32_t m_tiles = (c.n_q + 15) / 16;
    if (m_tiles == 1) {
      mma_begin<kHeadDim, 4>(a, c, st);
    } else if (m_tiles == 2) {
      mma_begin<kHeadDim, 2>(a, c, st);
    } else {
      mma_begin<kHeadDim, 1>(a, c, st);
    }
  }
  static __device__ __forceinline__ void run(const PagedAttentionArgs& a, const Cta& c,
                                             unsigned char* smem, State& st) {
    const int32_t m_tiles = (c.n_q + 15) / 16;
    if (m_tiles == 1) {
      mma_tiles<kHeadDim, 4>(a, c, smem, st);
    } else if (m_tiles == 2) {
      mma_tiles<kHeadDim, 2>(a, c, smem, st);
    } else {
      mma_tiles<kHeadDim, 1>(a, c, smem, st);
    }
  }
  static __device__ __forceinline__ void finish(const PagedAttentionArgs& a, const Cta& c,
                                                unsigned char* smem, const State& st, int32_t entry,
                                                int32_t n_entries) {
    const int32_t m_tiles = (c.n_q + 15) / 16;
    if (m_tiles == 1) {
      mma_finish<kHeadDim, 4>(a, c, smem, st, entry, n_entries);
    } else if (m_tiles == 2) {
      mma_finish<kHeadDim, 2>(a, c, smem, st, entry, n_entries);
    } else {
      mma_finish<kHeadDim, 1>(a, c, smem, st, entry, n_entries);
    }
  }
};

// grid (n_runs with run_first, else n_tokens; n_kv_heads; n_parts or fewer:
// run_grid_parts): without run_first only CTAs of run heads (token_run[t] >
// 0) work; the others return at once. Run: MmaRun or WgmmaRun.
template <class Run, int kHeadDim>
__global__ void __launch_bounds__(kThreads, 2)
    run_attention_kernel(const PagedAttentionArgs a, const int32_t n_parts) {
  // Without a window the first partition's slot table is resolved before the
  // wait: runs, slots and block tables are the step's metadata (cuda/pdl.h),
  // so at decode batch sizes three dependent loads leave the chain of
  // kernels. Windows read slot_positions, which rope_write_kv writes for this
  // step's slots: those wait first. Every path below passes pdl_begin
  // (`waited`) before it writes or returns.
  bool waited = a.sliding_window > 0;
  if (waited) pdl_begin();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // (WgmmaRun's swizzled tiles need 1024-byte alignment; kBytes has the slack.)
  unsigned char* smem = smem_raw;
  if constexpr (Run::kAlign > 16) {
    smem += (Run::kAlign - reinterpret_cast<uintptr_t>(smem_raw) % Run::kAlign) % Run::kAlign;
  }
  auto* s_flat = reinterpret_cast<int32_t*>(smem + Run::kFlat);
  auto* s_kpos = reinterpret_cast<int32_t*>(smem + Run::kKpos);

  Cta c;
  c.t0 = a.run_first != nullptr ? a.run_first[blockIdx.x] : blockIdx.x;
  c.kvh = blockIdx.y;
  const int32_t rows = a.token_run[c.t0];
  if (rows <= 0) {  // not a run head (uniform)
    if (!waited) pdl_begin();
    return;
  }
  c.g = a.n_heads / a.n_kv_heads;
  c.n_q = rows * c.g;  // query vector m = row (m / g), head (m % g) of the group
  const int tid = threadIdx.x;
  const int32_t last_slot = a.token_slot[c.t0 + rows - 1];
  // With run_split (n_parts == gridDim.z, one partition per CTA) the run's
  // tiles are dealt out evenly: CTA z takes tiles [z T / S, (z + 1) T / S)
  // of T = ceil(context / kTile), so every CTA gets floor or ceil of T / S
  // tiles (<= kRunMaxPartition keys: host check) and none is empty while
  // T >= S. (Ranges rounded up to whole tiles instead left up to half the
  // CTAs empty and the rest with twice the tiles: H100, 7B batch 1 at 4K
  // and 0.5B at 8K, 3% slower steps than fixed partitions.)
  const int32_t run_tiles = (last_slot + 1 + kTile - 1) / kTile;  // 0 for padding
  // Fixed partitions: a decode row (a run of one) whose partitions each have
  // a CTA deals its tiles out evenly over the partitions fixed ones would
  // take, last_slot / P + 1 (the combine merges exactly those for the row),
  // instead of P-key partitions and a short tail. Its CTAs' longest range,
  // the step's latency, then ~halves where a context just passes a multiple
  // of P (the sparse draft's 1088-slot window: 1024 + 64 keys -> 2 x 544).
  // Multi-row runs keep P-key partitions: the combine bounds each row's
  // partitions by its own slot, and a run's rows may straddle a multiple of P.
  const int32_t row_parts = a.run_split == 0 && rows == 1 ? last_slot / a.partition_size + 1 : 0;
  const bool even_row = row_parts > 0 && row_parts <= static_cast<int32_t>(gridDim.z);
  const int32_t even_parts = a.run_split > 0 ? n_parts : row_parts;

  // Partitions blockIdx.z, + gridDim.z, ...: one each when the grid has a
  // CTA per partition; several when the grid is capped (run_grid_parts),
  // accumulated in one running softmax and written out once as the CTA's
  // entry blockIdx.z of gridDim.z (H100, 64 x 8K 5-row runs: 9 partials a
  // (token, head) were 36 MB of writes a layer, and as many combine reads).
  // The combine merges entries z <= own slot / P of a token: entry z holds
  // partitions z, z + gridDim.z, ..., so an entry past that bound holds only
  // keys past the token's slot, and every entry within it was written (its
  // first partition has keys). Partitions ascend, so the first without keys
  // ends the loop (uniform across the CTA: the barriers below stay matched).
  typename Run::State st;
  bool begun = false;
  for (int32_t part = blockIdx.z; part < n_parts; part += gridDim.z) {
    c.part = part;
    if (a.run_split > 0 || even_row) {
      const int64_t first = int64_t{part} * run_tiles / even_parts;
      const int64_t end = int64_t{part + 1} * run_tiles / even_parts;
      c.start = static_cast<int32_t>(first) * kTile;
      c.n_keys = min(static_cast<int32_t>(end - first) * kTile, last_slot + 1 - c.start);
    } else {
      c.start = c.part * a.partition_size;
      c.n_keys = min(a.partition_size, last_slot + 1 - c.start);
    }
    if (c.n_keys <= 0) {
      if (begun) break;  // (waited): the partitions so far are written below
      if (!waited) pdl_begin();
      if (gridDim.z == 1) {  // only when no row has a slot (padding): zeros
        for (int i = tid; i < c.n_q * kHeadDim; i += kThreads) {
          const int32_t m = i / kHeadDim;
          const int64_t head = static_cast<int64_t>(c.kvh) * c.g + m % c.g;
          a.out[(c.t0 + m / c.g) * a.out_stride + head * kHeadDim + i % kHeadDim] =
              __float2bfloat16(0.0f);
        }
      } else if (a.run_split > 0) {
        // The combine reads every CTA's entry: mark this one empty (it
        // skips entries whose max is -inf without reading their acc).
        for (int m = tid; m < c.n_q; m += kThreads) {
          const int32_t head = c.kvh * c.g + m % c.g;
          float* w = a.workspace +
                     workspace_entry(c.t0 + m / c.g, head, part, a.n_heads, n_parts, kHeadDim);
          w[kHeadDim] = -INFINITY;
          w[kHeadDim + 1] = 0.0f;
        }
      }
      return;
    }
    c.n_tiles = (c.n_keys + kTile - 1) / kTile;

    // The partition's slots, once (whole tiles; -1 = not loaded: past the keys
    // or hidden from every row).
    const int32_t* table =
        a.block_tables + static_cast<int64_t>(a.token_seq[c.t0]) * a.max_blocks_per_seq;
    const int64_t hidden_for_all = static_cast<int64_t>(a.token_pos[c.t0]) - a.sliding_window;
    for (int i = tid; i < c.n_tiles * kTile; i += kThreads) {
      int32_t flat = -1;
      int32_t kpos = 0;
      if (i < c.n_keys) {
        const int32_t j = c.start + i;
        const int32_t f = table[j / a.block_size] * a.block_size + j % a.block_size;
        flat = f;
        if (a.sliding_window > 0) {  // positions matter only to windows (one dependent load less)
          kpos = a.slot_positions[f];
          if (kpos <= hidden_for_all) flat = -1;
        }
      }
      s_flat[i] = flat;
      s_kpos[i] = kpos;
    }
    if (!waited) {  // K/V (this step's slots among them) and Q only after the wait
      pdl_begin();
      waited = true;
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < Run::kStages - 1; ++s) {
      if (s < c.n_tiles) Run::load_tile(a, c, smem, s, s);
      cp_async_commit();
    }
    if (!begun) {  // Q after the wait, as the prologue's copies fly
      Run::begin(a, c, st);
      begun = true;
    }
    Run::run(a, c, smem, st);
    // The next partition refills the slot tables and K/V stages (Run::run
    // drained its copies; every warp must be done reading them).
    __syncthreads();
  }
  if (begun) Run::finish(a, c, smem, st, static_cast<int32_t>(blockIdx.z), gridDim.z);
}

template <class Run, int kHeadDim>
void launch(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  constexpr size_t kBytes = Run::kBytes;
  auto* const kernel = run_attention_kernel<Run, kHeadDim>;
  // Opting in to more than 48 KB of dynamic shared memory is per kernel and
  // device-wide; setting it again is cheap and keeps no state here.
  SS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kBytes)));
  const int32_t grid_parts = run_attention_entries(a, n_parts);
  const int32_t grid_runs = a.run_first != nullptr ? a.n_runs : a.n_tokens;
  const dim3 grid(static_cast<unsigned>(grid_runs), static_cast<unsigned>(a.n_kv_heads),
                  static_cast<unsigned>(grid_parts));
  launch_pdl(kernel, grid, kThreads, kBytes, stream, a.pdl, a, n_parts);
}

}  // namespace

int32_t run_attention_entries(const PagedAttentionArgs& a, int32_t n_parts) {
  if (a.run_split > 0 || a.run_grid_parts <= 0) return n_parts;
  return std::min(n_parts, a.run_grid_parts);
}

int32_t run_attention_partition_size(const PagedAttentionArgs& a) {
  if (a.run_partition_size > 0) {
    SS_CHECK_MSG(a.run_partition_size % kTile == 0 && a.run_partition_size <= kRunMaxPartition &&
                     a.run_partition_size >= a.partition_size,
                 "run attention: run_partition_size must be a multiple of 64 in "
                 "[partition_size, 1024]");
    return a.run_partition_size;
  }
  // The longest partition that still gives about a wave of CTAs (2 per SM
  // on a 132-SM part), and never under 256 keys: longer partitions amortise
  // the slot resolve and the pipeline's fill and write fewer split-K
  // partials. H100, attention_bench, 5-row runs: 32 x 16K 701 / 561 / 499 us
  // at 256 / 512 / 1024; 8 x 8K 108 / 96 / 83 us (256 CTAs at 1024); 1 x 8K
  // 28 / 37 / 59 us (128 / 64 / 32 CTAs), and 55 us at 64.
  const int64_t runs = a.n_runs > 0 ? a.n_runs : a.n_tokens;
  constexpr int64_t kMinCtas = 256;
  constexpr int32_t kMinPartition = 256;
  for (int32_t p = kRunMaxPartition; p > kMinPartition; p /= 2) {
    const int64_t parts = (a.max_context + p - 1) / p;
    if (p >= a.partition_size && runs * a.n_kv_heads * parts >= kMinCtas) return p;
  }
  return std::max(kMinPartition, a.partition_size);
}

int32_t run_attention_graph_partition_size(int32_t n_runs, int32_t n_kv_heads,
                                           int32_t partition_size) {
  // H100, attention_bench, decode rows, us at 256 / 512 / 1024: 7B shape
  // (4 kv heads) 8 x 1K 13.0 / 17.1 / 23.8, 8 x 8K 73 / 69 / 63, 32 x 1K
  // 41 / 38 / 35; 0.5B shape (2 kv heads) at 1.1K: 8 rows 10.3 / 13.9 / 20.0,
  // 32 rows 16.9 / 15.0 / 20.5, 64 rows 26.0 / 23.0 / 22.8.
  const int64_t groups = int64_t{n_runs} * n_kv_heads;
  const int32_t p = groups >= 128 ? 1024 : groups >= 64 ? 512 : 256;
  return std::max(p, partition_size);
}

int32_t run_attention_graph_grid_parts(int32_t n_runs, int32_t n_kv_heads) {
  constexpr int64_t kGraphCtas = 1024;
  const int64_t groups = std::max<int64_t>(1, int64_t{n_runs} * n_kv_heads);
  return static_cast<int32_t>((kGraphCtas + groups - 1) / groups);
}

int32_t run_attention_eager_grid_parts(int32_t n_runs, int32_t n_kv_heads) {
  const int64_t groups = std::max<int64_t>(1, int64_t{n_runs} * n_kv_heads);
  return static_cast<int32_t>(std::clamp<int64_t>(kRunEagerCtas / groups, 1, 65535));
}

int32_t run_attention_split(int32_t n_runs, int32_t n_kv_heads, int32_t max_context) {
  const int64_t groups = std::max<int64_t>(1, int64_t{n_runs} * n_kv_heads);
  if (groups >= kRunSplitMaxGroups || max_context <= kTile) return 0;
  const int64_t tiles = (int64_t{max_context} + kTile - 1) / kTile;
  const int64_t longest = (int64_t{max_context} + kRunMaxPartition - 1) / kRunMaxPartition;
  const int64_t wanted =
      std::min<int64_t>(kRunSplitMaxParts, (kRunSplitCtas + groups - 1) / groups);
  const int64_t split = std::max(longest, std::min(tiles, wanted));
  return split >= 2 ? static_cast<int32_t>(std::min<int64_t>(split, 65535)) : 0;
}

bool run_attention_supported(int32_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void launch_run_attention(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  SS_CHECK(a.token_run != nullptr);
  SS_CHECK(a.run_first == nullptr || (a.n_runs > 0 && a.n_runs <= a.n_tokens));
  SS_CHECK_EQ(a.partition_size % kTile, 0);
  SS_CHECK_LE(a.partition_size, kRunMaxPartition);
  // Q is read as bf16 pairs, K/V rows with 16-byte copies.
  SS_CHECK(reinterpret_cast<uintptr_t>(a.q) % 4 == 0 && a.q_stride % 2 == 0);
  const bool wgmma = a.run_math == RunMath::kWgmma ? true
                     : a.run_math == RunMath::kMma ? false
                                                   : run_attention_uses_wgmma(a);
  SS_CHECK_MSG(!wgmma || run_attention_wgmma_supported(a),
               "run attention: the wgmma math needs the sm_90a image and a 4-byte aligned output");
  switch (a.head_dim) {
    case 64:
      wgmma ? launch<WgmmaRun<64>, 64>(a, n_parts, stream)
            : launch<MmaRun<64>, 64>(a, n_parts, stream);
      break;
    case 128:
      wgmma ? launch<WgmmaRun<128>, 128>(a, n_parts, stream)
            : launch<MmaRun<128>, 128>(a, n_parts, stream);
      break;
    default:
      SS_CHECK_MSG(false, "run attention: head_dim must be 64 or 128");
  }
}

bool run_attention_uses_wgmma(const PagedAttentionArgs& a) {
  return run_attention_wgmma_supported(a);
}

bool run_attention_wgmma_supported(const PagedAttentionArgs& a) {
  // Its output is written as bf16 pairs.
  return device_runs_sm90a() && reinterpret_cast<uintptr_t>(a.out) % 4 == 0 &&
         a.out_stride % 2 == 0;
}

}  // namespace specstack::cuda

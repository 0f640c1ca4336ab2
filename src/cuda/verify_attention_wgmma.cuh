// The Hopper math of the run kernel (verify_attention.h; the partition loop,
// slot tables and write-out format are verify_attention.cu's): one warpgroup
// computes all of a CTA's query vectors (run rows x GQA heads, up to 64, one
// m64 tile) with warpgroup MMAs (wgmma, sm_90a):
//  * S = Q K^T per 64-key tile: wgmma m64n64k16, Q as register A fragments
//    loaded once per partition, K from shared memory (K-major, 128-byte
//    swizzle): kHeadDim / 16 instructions a tile, where the mma.sync kernel
//    issues 64 x kHeadDim / 128 per M tile and warp, plus the ldmatrix loads
//    each warp repeats for its own M tile;
//  * mask and online softmax in fp32 on the accumulator registers (rows of a
//    warp with no query vector skip it);
//  * O += P V: wgmma m64n{kHeadDim}k16 with P as the register A operand and V
//    from shared memory as an MN-major operand.
// The K / V tiles arrive through the same three-stage cp.async pipeline as
// the mma.sync kernel's, 16-byte chunks swizzled on the way in (no padded
// rows: 32 KB a stage at head dim 128, 104 KB a CTA, two CTAs an SM).
// Why: at 64 x 8K the mma.sync kernel read a 5-row verify run's KV at
// 2.15 TB/s against a decode row's 2.62 (H100, session 23): its three M
// tiles multiplied the per-warp instruction stream (each warp its own MMAs,
// ldmatrix loads and softmax over the whole tile) and the busiest SM
// sub-partition set the pace. A wgmma tile costs the same instructions for
// 1 row as for 9. Measured (H100, session 32, attention_bench): 64 x 8K 5-row
// runs 512 -> 452 us a layer with the first version; ncu then showed a
// per-tile chain of ~230 load-issue and ~660 softmax instructions a warp
// (the per-copy index arithmetic; an FMUL, exp2f and an unconditional O
// rescale per score) and 8192 CTAs of non-head tokens that only read
// token_run: the hoisted copies, FFMA + ex2, the rescale skipped where no max
// moved, the grid over runs (PagedAttentionArgs::run_first) and a warp-per-row
// combine (attention.cu) took it to 434 us (2.47 TB/s; the kernel alone 413
// us in ncu), and made it faster than mma.sync at every measured shape,
// batch-1 decode and head dim 64 included. An L2 prefetch of the tiles past
// the pipeline (2 / 4 / 8 ahead) was slower at every distance (-2 to -30%).
// Layouts: cuda/wgmma.cuh. Device code only in the sm_90a image.
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "cuda/attention.h"
#include "cuda/run_attention_common.cuh"
#include "cuda/verify_attention.h"
#include "cuda/wgmma.cuh"

namespace specstack::cuda::run_kernel {

template <int kHeadDim>
struct WgmmaRun {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims of the wgmma run kernel");
  static constexpr int kStages = 3;  // tiles in flight: 2 loading while 1 is computed
  static constexpr int kHalves = kHeadDim / 64;
  static constexpr uint32_t kHalf = kTile * 128;                 // bytes of a 64-dim half of a tile
  static constexpr uint32_t kStage = kHalves * kHalf;            // bytes of one K (V) tile
  static constexpr size_t kAlign = 1024;                         // the 128-byte swizzle's period
  static constexpr size_t kK = 0;                                // [kStages][halves][kTile][128 B]
  static constexpr size_t kV = kK + kStages * kStage;            // likewise
  static constexpr size_t kFlat = kV + kStages * kStage;         // int32 [kRunMaxPartition]
  static constexpr size_t kKpos = kFlat + kRunMaxPartition * 4;  // int32 [kRunMaxPartition]
  static constexpr size_t kBytes = kKpos + kRunMaxPartition * 4 + kAlign;  // + alignment slack
  static_assert(2 * (kBytes + 1024) <= 228 * 1024, "two CTAs an SM");

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // Issues the cp.async loads of tile `tile` into stage buffer `buf`. Thread
  // i copies 16-byte chunk i % kChunks of keys i / kChunks + kKeysPerPass u:
  // its chunk and the swizzle (key % 8) stay the same for every u, so a copy
  // is a key's row lookup, one address multiply and a destination that is a
  // constant plus an immediate (the per-copy index arithmetic had been ~14
  // instructions a copy; ncu, H100).
  static __device__ __forceinline__ void load_tile(const PagedAttentionArgs& a, const Cta& c,
                                                   unsigned char* smem, int32_t tile, int buf) {
    using namespace wg;
    constexpr int kChunks = kHeadDim / 8;
    constexpr int kKeysPerPass = kThreads / kChunks;  // 8 at head dim 128, 16 at 64
    static_assert(kKeysPerPass % 8 == 0 && kTile % kKeysPerPass == 0, "whole swizzle periods");
    const int chunk = threadIdx.x % kChunks;
    const int key = threadIdx.x / kChunks;
    const auto* s_flat = reinterpret_cast<const int32_t*>(smem + kFlat) + tile * kTile + key;
    const uint32_t dst = swz_offset(key, chunk, kHalf);
    const uint32_t k_dst = smem_u32(smem + kK + buf * kStage) + dst;
    const uint32_t v_dst = smem_u32(smem + kV + buf * kStage) + dst;
    const int32_t kv_row = a.n_kv_heads * kHeadDim;
    const bf16* k_src = a.k_cache + c.kvh * kHeadDim + chunk * 8;
    const bf16* v_src = a.v_cache + c.kvh * kHeadDim + chunk * 8;
#pragma unroll
    for (int u = 0; u < kTile / kKeysPerPass; ++u) {
      const int32_t flat = s_flat[u * kKeysPerPass];
      const int64_t off = flat >= 0 ? int64_t{flat} * kv_row : 0;
      const int bytes = flat >= 0 ? 16 : 0;
      cp_async_16(k_dst + u * kKeysPerPass * 128, k_src + off, bytes);
      cp_async_16(v_dst + u * kKeysPerPass * 128, v_src + off, bytes);
    }
  }

  // A CTA's running softmax over the partitions it takes (registers): the
  // lane's Q fragments and visibility limits of its two query vectors
  // (16 warp + g, + 8), their O accumulators (accumulator layout), running
  // max (log2 domain) and this lane's share of the sum.
  struct State {
    uint32_t qf[kHeadDim / 16][4];
    int32_t row_slot[2], row_lim[2];
    float o[kHeadDim / 2];
    float row_max[2], row_sum[2];
  };

  // Before the CTA's first partition: Q and an empty softmax.
  static __device__ __forceinline__ void begin(const PagedAttentionArgs& a, const Cta& c,
                                               State& st) {
    load_query_fragments<kHeadDim>(a, c, (threadIdx.x >> 5) * 16, st.row_slot, st.row_lim, st.qf);
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) st.o[i] = 0.0f;
    st.row_max[0] = st.row_max[1] = -INFINITY;
    st.row_sum[0] = st.row_sum[1] = 0.0f;
  }

  // The partition's tiles (the first kStages - 1 already issued by the
  // caller) into the state; drains the partition's copies.
  static __device__ __forceinline__ void run(const PagedAttentionArgs& a, const Cta& c,
                                             unsigned char* smem, State& st) {
    using namespace wg;
    constexpr int kKs = kHeadDim / 16;  // 16-dim k steps of QK
    constexpr int kDt = kHeadDim / 8;   // 8-dim column groups of O
    constexpr unsigned kFull = 0xffffffffu;
    const auto* s_flat = reinterpret_cast<const int32_t*>(smem + kFlat);
    const auto* s_kpos = reinterpret_cast<const int32_t*>(smem + kKpos);
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int tq = lane & 3;
    // Warp-uniform: the warp's 16 accumulator rows hold a query vector.
    const bool active = warp * 16 < c.n_q;
    const float q_scale = a.scale * kLog2e;
    // Tiles every vector sees whole: before the first row's own slot, no window.
    const int32_t first_slot = a.token_slot[c.t0];
    float(&o)[kHeadDim / 2] = st.o;
    float(&row_max)[2] = st.row_max;
    float(&row_sum)[2] = st.row_sum;

    float s[32];     // S of a 64-key tile, then P (accumulator layout)
    uint32_t p[16];  // P as the A fragments of the 4 k-steps of P V
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    for (int32_t tile = 0; tile < c.n_tiles; ++tile) {
      cp_async_wait<kStages - 2>();
      fence_proxy_async();  // this thread's copies, before the wgmmas read them
      __syncthreads();      // tile's data visible; the buffer refilled below is free
      if (tile + kStages - 1 < c.n_tiles) {
        load_tile(a, c, smem, tile + kStages - 1, (tile + kStages - 1) % kStages);
      }
      cp_async_commit();  // (empty groups keep the wait count uniform)
      const int buf = tile % kStages;

      // S = Q K^T.
      const uint64_t k_desc = make_desc(smem_u32(smem + kK + buf * kStage), 16, 1024);
      fence_regs(s);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKs; ++kk) {
        wgmma_rs_kmajor(s, st.qf[kk][0], st.qf[kk][1], st.qf[kk][2], st.qf[kk][3],
                        k_desc + (((kk >> 2) * kHalf + (kk & 3) * 32) >> 4), kk > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);

      if (active) {
        // Mask (raw scores; -inf hides). s[4 j + e]: vector h = e / 2, key 8 j + 2 tq + e % 2.
        const int32_t key0 = tile * kTile;
        const bool whole = a.sliding_window <= 0 && key0 + kTile <= c.n_keys &&
                           c.start + key0 + kTile - 1 <= first_slot;
        if (!whole) {
#pragma unroll
          for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int32_t key = key0 + j * 8 + tq * 2 + (e & 1);
              const int h = e >> 1;
              const bool visible = key < c.n_keys && s_flat[key] >= 0 &&
                                   c.start + key <= st.row_slot[h] && s_kpos[key] > st.row_lim[h];
              if (!visible) s[4 * j + e] = -INFINITY;
            }
          }
        }
        // Online softmax per vector (the 4 lanes of a quad hold one vector's
        // keys) in the log2 domain: row_max is max(score) * scale * log2 e,
        // p = 2^(score * scale log2 e - row_max) as one FFMA and one MUFU.
        float rescale[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 2));
          const float m_new = fmaxf(row_max[h], mx * q_scale);  // q_scale > 0
          // Nothing visible yet: subtract 0 so 2^(-inf - 0) = 0 instead of NaN.
          const float sub = m_new == -INFINITY ? 0.0f : m_new;
          rescale[h] = fast_exp2(row_max[h] - sub);  // 1 when the max held, 0 from -inf
          row_max[h] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; ++e) {
              const float pv = fast_exp2(fmaf(s[4 * j + e], q_scale, -sub));
              s[4 * j + e] = pv;
              sum += pv;
            }
          }
          row_sum[h] = row_sum[h] * rescale[h] + sum;
        }
        // O needs rescaling only where some vector of the warp raised its max.
        if (__any_sync(kFull, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
          for (int d = 0; d < kDt; ++d) {
            o[4 * d] *= rescale[0];
            o[4 * d + 1] *= rescale[0];
            o[4 * d + 2] *= rescale[1];
            o[4 * d + 3] *= rescale[1];
          }
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) p[i] = 0u;
      }

      // O += P V (k-step kk: keys 16 kk .. 16 kk + 15 of the tile).
      const uint64_t v_desc = make_desc(smem_u32(smem + kV + buf * kStage), kHalf, 1024);
      fence_regs(o);
      fence_regs(p);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wgmma_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                 v_desc + ((kk * 16 * 128) >> 4));
      }
      wgmma_commit();
      wgmma_wait<0>();  // the stage may be refilled after the next barrier
      fence_regs(o);
      fence_regs(p);
    }
    cp_async_wait<0>();
  }

  // After the CTA's last partition: bf16 out when it is the only entry
  // (n_entries 1: it saw every key), else its unnormalised partial, max and
  // sum as entry `entry` of n_entries for the combine.
  static __device__ __forceinline__ void finish(const PagedAttentionArgs& a, const Cta& c,
                                                unsigned char* /*smem*/, const State& st,
                                                int32_t entry, int32_t n_entries) {
    using namespace wg;
    constexpr int kDt = kHeadDim / 8;
    constexpr unsigned kFull = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int tq = lane & 3;
    const float(&o)[kHeadDim / 2] = st.o;
    // Each lane writes its two vectors' columns 8 d + 2 tq, + 1.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = st.row_sum[h];
      l += __shfl_xor_sync(kFull, l, 1);
      l += __shfl_xor_sync(kFull, l, 2);
      const int m = warp * 16 + g + h * 8;
      if (m >= c.n_q) continue;
      const int32_t t = c.t0 + m / c.g;
      const int32_t head = c.kvh * c.g + m % c.g;
      if (n_entries == 1) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16* out = a.out + t * a.out_stride + static_cast<int64_t>(head) * kHeadDim + tq * 2;
#pragma unroll
        for (int d = 0; d < kDt; ++d) {
          *reinterpret_cast<uint32_t*>(out + d * 8) =
              pack_bf16(o[4 * d + 2 * h] * inv, o[4 * d + 2 * h + 1] * inv);
        }
      } else {
        float* w = a.workspace + workspace_entry(t, head, entry, a.n_heads, n_entries, kHeadDim);
#pragma unroll
        for (int d = 0; d < kDt; ++d) {
          *reinterpret_cast<float2*>(w + d * 8 + tq * 2) =
              make_float2(o[4 * d + 2 * h], o[4 * d + 2 * h + 1]);
        }
        if (tq == 0) {
          w[kHeadDim] = st.row_max[h];
          w[kHeadDim + 1] = l;
        }
      }
    }
  }
#else
  static __device__ void load_tile(const PagedAttentionArgs&, const Cta&, unsigned char*, int32_t,
                                   int) {}
  struct State {};
  static __device__ void begin(const PagedAttentionArgs&, const Cta&, State&) {}
  static __device__ void run(const PagedAttentionArgs&, const Cta&, unsigned char*, State&) {
    __trap();  // never launched: run_attention_wgmma_supported() is false without sm_90a
  }
  static __device__ void finish(const PagedAttentionArgs&, const Cta&, unsigned char*, const State&,
                                int32_t, int32_t) {}
#endif
};

}  // namespace specstack::cuda::run_kernel

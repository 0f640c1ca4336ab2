#include <algorithm>
#include <cmath>

#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/one_launch_common.cuh"
#include "cuda/one_launch_decode.h"
#include "cuda/ptx_primitives.cuh"

namespace specstack::cuda {

namespace {

using namespace one_launch;  // NOLINT: the kernel's own building blocks

// After the layout's areas: two layer descriptors (this layer's and the
// next one's) and the RoPE frequencies, so that the pointers and constants
// every phase starts from are shared-memory reads, not dependent L2 round
// trips; then the stages.
struct Meta {
  OneLaunchLayer layers[2];  // [layer & 1]
  float inv_freq[kMaxHeadDim / 2];
};
constexpr size_t kMetaBytes = (sizeof(Meta) + 15) / 16 * 16;

size_t __host__ __device__ base_bytes(const OneLaunchDecodeArgs& a) {
  return layout_for(a.hidden, a.inter, a.n_heads, a.n_kv_heads, a.head_dim).total_bytes() +
         kMetaBytes;
}

// Layer `layer`'s descriptor into its slot, 8 bytes a thread (visible after
// the caller's next __syncthreads).
__device__ void load_descriptor(Meta* meta, const OneLaunchLayer* layers, int layer) {
  static_assert(sizeof(OneLaunchLayer) % 8 == 0);
  constexpr int kWords = sizeof(OneLaunchLayer) / 8;
  if (threadIdx.x < kWords) {
    reinterpret_cast<unsigned long long*>(&meta->layers[layer & 1])[threadIdx.x] =
        __ldg(reinterpret_cast<const unsigned long long*>(layers + layer) + threadIdx.x);
  }
}

struct Kernel {
  const OneLaunchDecodeArgs& a;
  char* smem;
  float* red;             // [kRowWarp] (row_reduce.cuh block_sum partials)
  float* values;          // [kUnitRows]
  float* stats;           // [4 * kMaxGroup + 4]
  float* merge_weights;   // [kMaxMergeSplits]
  float* head_out;        // [kMaxHeadDim]
  float* group_sums;      // [kThreads / (D / 2), D]
  char* stage_mid;        // [a.stage_mid] C's o columns, F's down rows
  char* stage_wide;       // [a.stage_wide] B's keys and values | A's qkv rows; E's gate/up rows
  const float* inv_freq;  // [D / 2] in shared memory
  int tid, lane, warp;
  int group, q_width, kv_width;
  int token, position, write_slot, n_ctx, splits;
  float row[kRowValues];  // this thread's residual values (phase A / E), i = tid + k * kThreads

  __device__ bf16* vec() const { return reinterpret_cast<bf16*>(smem); }
  // The stages' capacities (bytes); 0 without staging.
  __device__ int cap_mid() const { return a.stage ? a.stage_mid : 0; }
  __device__ int cap_wide() const { return a.stage ? a.stage_wide : 0; }
  __device__ int cap_qkv() const { return a.stage ? a.stage_qkv : 0; }
  __device__ int cap_keys() const { return cap_wide() - cap_qkv(); }
  __device__ char* stage_qkv() const { return stage_wide + (a.stage_wide - a.stage_qkv); }
  __device__ float* x_attn() const { return a.x + a.hidden; }  // the residual after attention

  // bf16(w * (v * inv_rms)) of the residual held in `row` into the shared vector.
  __device__ void norm_row(const float* w) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kRowValues; ++k) {
      if (tid + k * kThreads < a.hidden) ss += row[k] * row[k];
    }
    const float total = block_sum(ss, red);
    // 1 / sqrtf (IEEE), as the rmsnorm kernels and the CPU compute it.
    const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(a.hidden) + a.eps);
    bf16* out = vec();
#pragma unroll
    for (int k = 0; k < kRowValues; ++k) {
      const int i = tid + k * kThreads;
      if (i < a.hidden) out[i] = __float2bfloat16(w[i] * (row[k] * inv_rms));
    }
    __syncthreads();
  }

  // The residual (or, in layer 0, the token's embedding row) into `row`.
  __device__ void load_row(bool from_embedding) {
    const bf16* emb = a.embed + int64_t(token) * a.hidden;
#pragma unroll
    for (int k = 0; k < kRowValues; ++k) {
      const int i = tid + k * kThreads;
      if (i < a.hidden) row[k] = from_embedding ? bf(emb[i]) : __ldcg(a.x + i);
    }
  }

  // n bf16 of another phase's output into the shared vector (through L2).
  __device__ void load_vector(const bf16* src, int n) {
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(vec());
    for (int i = tid; i < n / 8; i += kThreads) d[i] = __ldcg(s + i);
    __syncthreads();
  }

  // Rows [r0, r0 + n) of a [rows, in] matrix toward L2.
  __device__ void prefetch_rows(const bf16* w, int64_t r0, int64_t n, int64_t in) const {
    prefetch_bytes(w + r0 * in, size_t(n * in) * 2);
  }

  // ---- phase A: q / k / v, RoPE, the cache write ----------------------------
  __device__ int rotary_units() const {
    return (a.n_heads + a.n_kv_heads) * (a.head_dim / 16);
  }
  __device__ int qkv_units() const {
    return rotary_units() + a.n_kv_heads * a.head_dim / kUnitRows;
  }
  // A unit's 16 rows as two runs of 8: a rotary unit is pairs [8 b, 8 b + 8)
  // of head h (rows j and j + D / 2), a v unit 16 consecutive v rows. Warp w
  // takes row w of the two runs (its row in the stage too).
  __device__ void qkv_runs(int u, int64_t* run0, int64_t* run1) const {
    const int half = a.head_dim / 2;
    if (u < rotary_units()) {
      const int h = u / (half / 8), b = u % (half / 8);
      *run0 = int64_t(h) * a.head_dim + 8 * b;
      *run1 = *run0 + half;
    } else {
      *run0 =
          int64_t(a.n_heads + a.n_kv_heads) * a.head_dim + int64_t(u - rotary_units()) * kUnitRows;
      *run1 = *run0 + 8;
    }
  }
  __device__ void stage_qkv_rows(const OneLaunchLayer& l) const {
    StageCursor cursor(cap_qkv());
    const int64_t run_bytes = int64_t(8) * a.hidden * 2;
    for (int u = blockIdx.x; u < qkv_units(); u += gridDim.x) {
      int64_t run0, run1;
      qkv_runs(u, &run0, &run1);
      const int at = cursor.take(int(2 * run_bytes));
      if (at >= 0) {
        stage_copy(stage_qkv() + at, l.qkv + run0 * a.hidden, run_bytes);
        stage_copy(stage_qkv() + at + run_bytes, l.qkv + run1 * a.hidden, run_bytes);
      } else if (a.stage) {
        prefetch_rows(l.qkv, run0, 8, a.hidden);
        prefetch_rows(l.qkv, run1, 8, a.hidden);
      }
    }
  }

  __device__ void qkv_phase(const OneLaunchLayer& l, int layer) {
    const int half = a.head_dim / 2;
    StageCursor cursor(cap_qkv());
    for (int u = blockIdx.x; u < qkv_units(); u += gridDim.x) {
      const bool rotary = u < rotary_units();
      const int h = rotary ? u / (half / 8) : 0;
      const int b = rotary ? u % (half / 8) : 0;
      const int64_t v_first = int64_t(u - rotary_units()) * kUnitRows;  // v units: of the v rows
      int64_t run0, run1;
      qkv_runs(u, &run0, &run1);
      const int64_t r = (warp < 8 ? run0 : run1) + (warp & 7);
      const int at = cursor.take(kUnitRows * a.hidden * 2);
      const float bias = l.qkv_bias != nullptr ? l.qkv_bias[r] : 0.0f;
      const float sum =
          at >= 0 ? dot_shared<true>(
                        vec(),
                        reinterpret_cast<const bf16*>(stage_qkv() + at) + int64_t(warp) * a.hidden,
                        a.hidden / 8, 0, 1, lane)
                  : dot_shared<false>(vec(), l.qkv + r * a.hidden, a.hidden / 8, 0, 1, lane);
      if (lane == 0) values[warp] = round_bf16(sum + bias);
      __syncthreads();
      if (rotary && tid < 8) {
        const int j = 8 * b + tid;
        float s, c;
        sincosf(static_cast<float>(position) * inv_freq[j], &s,
                &c);  // f32 angle, as rope_write_kv
        const float lo = values[tid], hi = values[8 + tid];
        const bf16 out_lo = __float2bfloat16(lo * c - hi * s);
        const bf16 out_hi = __float2bfloat16(hi * c + lo * s);
        if (h < a.n_heads) {
          const int64_t at = int64_t(h) * a.head_dim + j;
          a.q[at] = out_lo;
          a.q[at + half] = out_hi;
          if (a.capture != nullptr) {
            bf16* cap = a.capture + int64_t(layer) * q_width + at;
            cap[0] = out_lo;
            cap[half] = out_hi;
          }
        } else if (write_slot >= 0) {
          bf16* dst = l.k_cache + int64_t(write_slot) * kv_width + (h - a.n_heads) * a.head_dim + j;
          dst[0] = out_lo;
          dst[half] = out_hi;
        }
      } else if (!rotary && tid < kUnitRows && write_slot >= 0) {
        l.v_cache[int64_t(write_slot) * kv_width + v_first + tid] = __float2bfloat16(values[tid]);
      }
      __syncthreads();
    }
    if (blockIdx.x == 0 && tid == 0 && write_slot >= 0) a.slot_positions[write_slot] = position;
  }

  // ---- phase B: attention partials -------------------------------------------
  __device__ int64_t key_begin(int s) const {
    return int64_t(s) * n_ctx / splits;
  }
  __device__ int physical_slot(int64_t k) const {
    return __ldg(a.block_table + k / a.block_size) * a.block_size + int(k % a.block_size);
  }

  // Keys a unit stages: those of its split that exist before this step (the
  // step's own key, n_ctx - 1, is written in phase A), as many as fit.
  __device__ int64_t stageable_end(int s) const {
    const int64_t end = key_begin(s + 1);
    return end < n_ctx - 1 ? end : n_ctx - 1;
  }

  // Phase B's keys and values: for each unit, K rows [n, D] then V rows
  // [n, D] of its first n keys (the rest: L2 prefetches).
  __device__ void stage_keys(const OneLaunchLayer& l) const {
    StageCursor cursor(cap_keys());
    const int units = a.n_kv_heads * splits;
    const int pieces = a.head_dim / 8;  // 16 bytes each of a key's row
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int kvh = u / splits, s = u % splits;
      const int64_t k0 = key_begin(s), end = stageable_end(s);
      int at = 0;
      const int n = cursor.take_items(int(end > k0 ? end - k0 : 0), 4 * a.head_dim, &at);
      for (int i = tid; i < 2 * n * pieces; i += kThreads) {
        const int which = i / (n * pieces), rest = i % (n * pieces);
        const int kk = rest / pieces, c = rest % pieces;
        const bf16* cache = which == 0 ? l.k_cache : l.v_cache;
        ptx::cp_async_16(
            stage_wide + at + (int64_t(which) * n + kk) * a.head_dim * 2 + c * 16,
            cache + int64_t(physical_slot(k0 + kk)) * kv_width + int64_t(kvh) * a.head_dim + c * 8,
            16);
      }
      if (!a.stage) continue;
      for (int64_t k = k0 + n + tid; k < key_begin(s + 1); k += kThreads) {
        const int64_t off = int64_t(physical_slot(k)) * kv_width + int64_t(kvh) * a.head_dim;
        for (int b = 0; b < a.head_dim * 2; b += 128) {
          prefetch_l2(reinterpret_cast<const char*>(l.k_cache + off) + b);
          prefetch_l2(reinterpret_cast<const char*>(l.v_cache + off) + b);
        }
      }
    }
  }

  __device__ void attention_phase(const OneLaunchLayer& l) {
    const int D = a.head_dim, G = group;
    float* qf = reinterpret_cast<float*>(smem);  // [G, D]
    float* scores = qf + G * D;                  // [G, kKeyChunk] log2-scaled, then p
    bf16* vt = reinterpret_cast<bf16*>(scores + G * kKeyChunk);  // [kKeyChunk, D]
    int* slots = reinterpret_cast<int*>(vt + kKeyChunk * D);     // [kKeyChunk]
    float* m_run = stats;                                        // [G] running max (log2 units)
    float* l_run = stats + kMaxGroup;                            // [G] running sum
    float* corr = stats + 2 * kMaxGroup;                         // [G] this chunk's rescale
    const float scale = a.scale * kLog2e;
    const int pairs = G * D / 2;  // (head, dim pair) items, at most 2 a thread
    const int units = a.n_kv_heads * splits;
    StageCursor cursor(cap_keys());
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int kvh = u / splits, s = u % splits;
      const int64_t k0 = key_begin(s), k1 = key_begin(s + 1), end = stageable_end(s);
      // Keys [k0, staged_end) are in the stage: K [n, D] at k_stage, V after.
      int at = 0;
      const int n = cursor.take_items(int(end > k0 ? end - k0 : 0), 4 * D, &at);
      const int64_t staged_end = k0 + n;
      const bf16* k_stage = reinterpret_cast<const bf16*>(stage_wide + at);
      const bf16* v_stage = k_stage + int64_t(n) * D;
      for (int i = tid; i < G * D; i += kThreads)
        qf[i] = bf(__ldcg(a.q + int64_t(kvh) * G * D + i));
      if (tid < G) {
        m_run[tid] = -INFINITY;
        l_run[tid] = 0.0f;
      }
      float2 acc[2] = {make_float2(0.0f, 0.0f), make_float2(0.0f, 0.0f)};
      for (int64_t c0 = k0; c0 < k1; c0 += kKeyChunk) {
        const int nk = static_cast<int>(k1 - c0 < kKeyChunk ? k1 - c0 : kKeyChunk);
        // A chunk wholly in the stage reads K and V there; any other builds
        // its V tile (staged keys copied, the rest loaded) while the scores
        // are computed. The same chunks either way: staging changes no bit.
        const bool staged = c0 + nk <= staged_end;
        if ((!staged || l.window != 0) && tid < nk) slots[tid] = physical_slot(c0 + tid);
        __syncthreads();
        const bf16* v_tile = staged ? v_stage + (c0 - k0) * D : vt;
        if (!staged) {
          const int chunks = D / 8;
          for (int i = tid; i < nk * chunks; i += kThreads) {
            const int kk = i / chunks, c = i % chunks;
            if (c0 + kk < staged_end) {
              *reinterpret_cast<uint4*>(vt + kk * D + c * 8) =
                  *reinterpret_cast<const uint4*>(v_stage + (c0 + kk - k0) * D + c * 8);
            } else {
              ptx::cp_async_16(vt + kk * D + c * 8,
                               l.v_cache + int64_t(slots[kk]) * kv_width + kvh * D + c * 8, 16);
            }
          }
          ptx::cp_async_commit();
        }
        // Scores: 4 threads a key, a quarter of the dims each. The thread's
        // key slice stays in registers across the group's heads (one
        // accumulator live, not one a head).
        {
          const int kk = tid / 4, quarter = tid % 4, dims = D / 4;
          constexpr int kMaxSlices = kMaxHeadDim / 16;  // uint2 (4 bf16) slices a thread
          uint2 key[kMaxSlices];
          bool visible = false;
          if (kk < nk) {
            const bool key_staged = c0 + kk < staged_end;
            const bf16* kp =
                key_staged ? k_stage + (c0 + kk - k0) * D + quarter * dims
                           : l.k_cache + int64_t(slots[kk]) * kv_width + kvh * D + quarter * dims;
#pragma unroll
            for (int c = 0; c < kMaxSlices; ++c) {
              if (4 * c < dims) {
                key[c] = key_staged ? *reinterpret_cast<const uint2*>(kp + 4 * c)
                                    : __ldcg(reinterpret_cast<const uint2*>(kp + 4 * c));
              }
            }
            visible = l.window == 0 || __ldcg(a.slot_positions + slots[kk]) > position - l.window;
          } else {
#pragma unroll
            for (int c = 0; c < kMaxSlices; ++c) key[c] = make_uint2(0u, 0u);
          }
          for (int h = 0; h < G; ++h) {  // G is uniform: every lane shuffles
            const float* qh = qf + h * D + quarter * dims;
            float dot = 0.0f;
#pragma unroll
            for (int c = 0; c < kMaxSlices; ++c) {
              if (4 * c < dims) {
                const float2 k01 =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&key[c].x));
                const float2 k23 =
                    __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&key[c].y));
                const float4 qv = *reinterpret_cast<const float4*>(qh + 4 * c);
                dot += qv.x * k01.x + qv.y * k01.y + qv.z * k23.x + qv.w * k23.y;
              }
            }
            dot += __shfl_xor_sync(0xffffffffu, dot, 1);
            dot += __shfl_xor_sync(0xffffffffu, dot, 2);
            if (kk < nk && quarter == 0) {
              scores[h * kKeyChunk + kk] = visible ? dot * scale : -INFINITY;
            }
          }
        }
        __syncthreads();
        // Online softmax, one warp a head.
        if (warp < G) {
          float* p_row = scores + warp * kKeyChunk;
          float mx = -INFINITY;
          for (int k = lane; k < nk; k += 32) mx = fmaxf(mx, p_row[k]);
          mx = warp_max(mx);
          const float m_old = m_run[warp];
          const float m_new = fmaxf(m_old, mx);
          const bool none = m_new == -INFINITY;  // every key so far masked
          float sum = 0.0f;
          for (int k = lane; k < nk; k += 32) {
            const float p = none ? 0.0f : exp2f(p_row[k] - m_new);
            p_row[k] = p;
            sum += p;
          }
          sum = warp_sum(sum);
          if (lane == 0) {
            const float c = none ? 1.0f : exp2f(m_old - m_new);
            l_run[warp] = l_run[warp] * c + sum;
            m_run[warp] = m_new;
            corr[warp] = c;
          }
        }
        if (!staged) ptx::cp_async_wait_all();  // (also any stage in flight: rare)
        __syncthreads();
        // P V for (head, dim pair) items.
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int it = tid + j * kThreads;
          if (it >= pairs) continue;
          const int h = it / (D / 2), dp = it % (D / 2);
          const float c = corr[h];
          acc[j].x *= c;
          acc[j].y *= c;
          const float* p = scores + h * kKeyChunk;
          const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(v_tile) + dp;
#pragma unroll 4
          for (int k = 0; k < nk; ++k) {
            const float2 v = __bfloat1622float2(v2[k * (D / 2)]);
            acc[j].x = fmaf(p[k], v.x, acc[j].x);
            acc[j].y = fmaf(p[k], v.y, acc[j].y);
          }
        }
        __syncthreads();
      }
      // Partials [kv head, split, head] of (m, l, acc[D]).
      float* part = a.partials + (int64_t(kvh) * splits + s) * G * (D + 2);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int it = tid + j * kThreads;
        if (it >= pairs) continue;
        const int h = it / (D / 2), dp = it % (D / 2);
        reinterpret_cast<float2*>(part + h * (D + 2) + 2)[dp] = acc[j];
      }
      if (tid < G) {
        part[tid * (D + 2)] = m_run[tid];
        part[tid * (D + 2) + 1] = l_run[tid];
      }
      __syncthreads();  // stats and tiles are the next unit's
    }
  }

  // ---- phase C: merge a head's splits, its share of o ------------------------
  // Units (head h, row block): blocks of o rows per head so that every CTA
  // has a unit; a unit merges its head (the same few KB from L2 as the
  // head's other blocks) and writes f32 sums of its rows over the head's
  // columns into o_partials[h].
  __device__ int row_blocks() const {
    const int b = int(gridDim.x) / a.n_heads;
    return b < 1 ? 1 : b;
  }
  __device__ int64_t block_row(int b) const {
    return int64_t(b) * a.hidden / row_blocks();
  }

  // Phase C's o columns: a unit's rows x the head's D columns, [rows, D].
  __device__ void stage_o(const OneLaunchLayer& l) const {
    StageCursor cursor(cap_mid());
    const int units = a.n_heads * row_blocks();
    const int pieces = a.head_dim / 8;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int h = u / row_blocks(), b = u % row_blocks();
      const int64_t r0 = block_row(b), rows = block_row(b + 1) - r0;
      const int at = cursor.take(int(rows * a.head_dim * 2));
      const bf16* first = l.o + r0 * q_width + int64_t(h) * a.head_dim;
      if (at >= 0) {
        for (int i = tid; i < rows * pieces; i += kThreads) {
          const int r = i / pieces, c = i % pieces;
          ptx::cp_async_16(stage_mid + at + (int64_t(r) * a.head_dim + c * 8) * 2,
                           first + int64_t(r) * q_width + c * 8, 16);
        }
      } else if (a.stage) {
        for (int64_t r = tid; r < rows; r += kThreads) {
          const char* p = reinterpret_cast<const char*>(first + r * q_width);
          for (int off = 0; off < a.head_dim * 2; off += 128) prefetch_l2(p + off);
        }
      }
    }
  }

  __device__ void o_phase(const OneLaunchLayer& l) {
    const int D = a.head_dim, G = group;
    const int groups = kThreads / (D / 2);  // split groups: threads of one dim pair
    const int dp = tid % (D / 2), sg = tid / (D / 2);
    const int units = a.n_heads * row_blocks();
    StageCursor cursor(cap_mid());
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int h = u / row_blocks(), b = u % row_blocks();
      const int at = cursor.take(int((block_row(b + 1) - block_row(b)) * D * 2));
      const bf16* staged = reinterpret_cast<const bf16*>(stage_mid + (at >= 0 ? at : 0));
      const int kvh = h / G, g = h % G;
      const float* first = a.partials + (int64_t(kvh) * splits * G + g) * (D + 2);
      const int64_t stride = int64_t(G) * (D + 2);  // from one split's entry to the next
      // Every thread's share of the accumulators, loaded before the weights
      // are known (splits <= kMaxMergeSplits over >= 8 groups: <= 16 a thread).
      constexpr int kMaxLoads = kMaxMergeSplits / (kThreads / (kMaxHeadDim / 2));
      float2 v[kMaxLoads];
#pragma unroll
      for (int k = 0; k < kMaxLoads; ++k) {
        const int s = sg + k * groups;
        v[k] = s < splits ? __ldcg(reinterpret_cast<const float2*>(first + s * stride + 2) + dp)
                          : make_float2(0.0f, 0.0f);
      }
      if (warp == 0) {
        float m[kMaxMergeSplits / 32], mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < kMaxMergeSplits / 32; ++k) {
          const int s = lane + 32 * k;
          m[k] = s < splits ? __ldcg(first + s * stride) : -INFINITY;
          mx = fmaxf(mx, m[k]);
        }
        mx = warp_max(mx);
        float total = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxMergeSplits / 32; ++k) {
          const int s = lane + 32 * k;
          if (s >= splits) continue;
          const float w = mx == -INFINITY ? 0.0f : exp2f(m[k] - mx);
          merge_weights[s] = w;
          total += w * __ldcg(first + s * stride + 1);
        }
        total = warp_sum(total);
        if (lane == 0) stats[3 * kMaxGroup] = total;
      }
      __syncthreads();
      float x = 0.0f, y = 0.0f;
#pragma unroll
      for (int k = 0; k < kMaxLoads; ++k) {
        const int s = sg + k * groups;
        if (s < splits) {
          x = fmaf(merge_weights[s], v[k].x, x);
          y = fmaf(merge_weights[s], v[k].y, y);
        }
      }
      group_sums[sg * D + 2 * dp] = x;  // [groups, D]: kThreads * 2 floats
      group_sums[sg * D + 2 * dp + 1] = y;
      __syncthreads();
      if (tid < D) {
        float sum = 0.0f;
        for (int q = 0; q < groups; ++q) sum += group_sums[q * D + tid];
        head_out[tid] = round_bf16(sum / stats[3 * kMaxGroup]);  // the attention output is bf16
      }
      __syncthreads();
      // Rows of o over the head's D columns: D / 8 lanes a row, 16-byte loads.
      const int lanes = D / 8, rows_per_warp = 32 / lanes;
      const int sub = lane / lanes, piece = lane % lanes;
      float hv[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) hv[e] = head_out[piece * 8 + e];
      const int64_t end = block_row(b + 1);
      // The loop variable is the warp's (uniform), so every lane shuffles.
      for (int64_t r0 = block_row(b) + int64_t(warp) * rows_per_warp; r0 < end;
           r0 += int64_t(kWarps) * rows_per_warp) {
        const int64_t r = r0 + sub;
        float dot = 0.0f;
        if (r < end) {
          const uint4 w =
              at >= 0 ? reinterpret_cast<const uint4*>(staged + (r - block_row(b)) * D)[piece]
                      : __ldcs(reinterpret_cast<const uint4*>(l.o + r * q_width + h * D) + piece);
          const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 wf = __bfloat1622float2(w2[e]);
            dot = fmaf(wf.x, hv[2 * e], dot);
            dot = fmaf(wf.y, hv[2 * e + 1], dot);
          }
        }
        for (int off = lanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
        if (r < end && piece == 0) a.o_partials[int64_t(h) * a.hidden + r] = dot;
      }
      __syncthreads();
    }
  }

  // ---- phase E: the residual after attention, rmsnorm, gate / up, SwiGLU -----
  // `row` still holds the layer's input residual (phase A's).
  __device__ void attention_residual(const OneLaunchLayer& l) {
#pragma unroll
    for (int k = 0; k < kRowValues; ++k) {
      const int i = tid + k * kThreads;
      if (i >= a.hidden) continue;
      float sum = l.o_bias != nullptr ? l.o_bias[i] : 0.0f;
      for (int h = 0; h < a.n_heads; ++h) sum += __ldcg(a.o_partials + int64_t(h) * a.hidden + i);
      row[k] += round_bf16(sum);  // the o projection's bf16 output, added in f32
      if (blockIdx.x == 0) x_attn()[i] = row[k];
    }
  }

  // Phase E's rows: a unit's n gate rows, then its n up rows, [2 n, hidden].
  __device__ void stage_gate_up(const OneLaunchLayer& l) const {
    StageCursor cursor(cap_wide());
    const int units = (a.inter + kUnitRows - 1) / kUnitRows;
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int64_t r0 = int64_t(u) * kUnitRows;
      const int64_t n = a.inter - r0 < kUnitRows ? a.inter - r0 : kUnitRows;
      const int64_t run = n * a.hidden * 2;
      const int at = cursor.take(int(2 * run));
      if (at >= 0) {
        stage_copy(stage_wide + at, l.gate_up + r0 * a.hidden, run);
        stage_copy(stage_wide + at + run, l.gate_up + (a.inter + r0) * a.hidden, run);
      } else if (a.stage) {
        prefetch_rows(l.gate_up, r0, n, a.hidden);
        prefetch_rows(l.gate_up, a.inter + r0, n, a.hidden);
      }
    }
  }

  __device__ void gate_up_phase(const OneLaunchLayer& l) {
    const int units = (a.inter + kUnitRows - 1) / kUnitRows;
    StageCursor cursor(cap_wide());
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const int64_t r0 = int64_t(u) * kUnitRows;
      const int64_t n = a.inter - r0 < kUnitRows ? a.inter - r0 : kUnitRows;
      const int at = cursor.take(int(2 * n * a.hidden * 2));
      const int64_t r = r0 + warp;
      if (r >= a.inter) continue;
      float2 gu;
      if (at >= 0) {
        const bf16* rows = reinterpret_cast<const bf16*>(stage_wide + at);
        gu = dot2_shared<true>(vec(), rows + int64_t(warp) * a.hidden, rows + (n + warp) * a.hidden,
                               a.hidden / 8, lane);
      } else {
        gu = dot2_shared<false>(vec(), l.gate_up + r * a.hidden,
                                l.gate_up + (a.inter + r) * a.hidden, a.hidden / 8, lane);
      }
      if (lane == 0)
        a.act[r] = __float2bfloat16(gu.x / (1.0f + expf(-gu.x)) * gu.y);  // gemv_silu's
    }
  }

  // ---- phase F: down, added into the residual --------------------------------
  __device__ int down_units() const {
    const int per_unit = kWarps / a.down_parts;
    return (a.hidden + per_unit - 1) / per_unit;
  }
  // Phase F's rows: a unit's n down rows, [n, inter].
  __device__ void stage_down(const OneLaunchLayer& l) const {
    StageCursor cursor(cap_mid());
    const int per_unit = kWarps / a.down_parts;
    for (int u = blockIdx.x; u < down_units(); u += gridDim.x) {
      const int64_t r0 = int64_t(u) * per_unit;
      const int64_t n = a.hidden - r0 < per_unit ? a.hidden - r0 : per_unit;
      const int at = cursor.take(int(n * a.inter * 2));
      if (at >= 0) {
        stage_copy(stage_mid + at, l.down + r0 * a.inter, n * a.inter * 2);
      } else if (a.stage) {
        prefetch_rows(l.down, r0, n, a.inter);
      }
    }
  }

  __device__ void down_phase(const OneLaunchLayer& l) {
    const int parts = a.down_parts, per_unit = kWarps / parts;
    StageCursor cursor(cap_mid());
    for (int u = blockIdx.x; u < down_units(); u += gridDim.x) {
      const int64_t r0 = int64_t(u) * per_unit;
      const int64_t n = a.hidden - r0 < per_unit ? a.hidden - r0 : per_unit;
      const int at = cursor.take(int(n * a.inter * 2));
      const int64_t r = r0 + warp / parts;
      const int part = warp % parts;
      const bool mine = r < a.hidden && part == 0 && lane == 0;
      const float base = mine ? __ldcg(x_attn() + r) : 0.0f;  // in flight beside the dot
      float sum = 0.0f;
      if (r < a.hidden) {
        sum = at >= 0
                  ? dot_shared<true>(
                        vec(), reinterpret_cast<const bf16*>(stage_mid + at) + (r - r0) * a.inter,
                        a.inter / 8, part, parts, lane)
                  : dot_shared<false>(vec(), l.down + r * a.inter, a.inter / 8, part, parts, lane);
      }
      if (parts > 1) {
        if (lane == 0) red[warp] = sum;
        __syncthreads();
        if (part == 0) {
          sum = 0.0f;
          for (int p = 0; p < parts; ++p) sum += red[warp + p];
        }
        __syncthreads();
      }
      if (mine) a.x[r] = base + round_bf16(sum);
    }
  }
};

__global__ void __launch_bounds__(kThreads, 1)
    one_launch_decode_kernel(const __grid_constant__ OneLaunchDecodeArgs a) {
  extern __shared__ __align__(16) char smem[];
  const Layout layout = layout_for(a.hidden, a.inter, a.n_heads, a.n_kv_heads, a.head_dim);
  float* small = reinterpret_cast<float*>(smem + layout.union_bytes());
  Kernel k{a, smem};
  k.red = small;
  k.values = k.red + kRowWarp;
  k.stats = k.values + kUnitRows;
  k.merge_weights = k.stats + 4 * kMaxGroup + 4;
  k.head_out = k.merge_weights + kMaxMergeSplits;
  k.group_sums = k.head_out + kMaxHeadDim;
  Meta* meta = reinterpret_cast<Meta*>(smem + layout.total_bytes());
  k.inv_freq = meta->inv_freq;
  for (int i = threadIdx.x; i < a.head_dim / 2; i += kThreads) meta->inv_freq[i] = a.inv_freq[i];
  load_descriptor(meta, a.layers, 0);
  __syncthreads();
  k.stage_mid = smem + layout.total_bytes() + kMetaBytes;
  k.stage_wide = k.stage_mid + a.stage_mid;
  k.tid = threadIdx.x;
  k.lane = threadIdx.x % 32;
  k.warp = threadIdx.x / 32;
  k.group = a.n_heads / a.n_kv_heads;
  k.q_width = a.n_heads * a.head_dim;
  k.kv_width = a.n_kv_heads * a.head_dim;
  k.token = __ldg(a.token);
  k.position = __ldg(a.position);
  k.write_slot = __ldg(a.write_slot);
  k.n_ctx = __ldg(a.context_slot) + 1;
  {
    // Splits per kv head: enough CTAs for the keys, never fewer than
    // kMinKeysPerSplit keys a split, at most a CTA each (and
    // kMaxMergeSplits, what phase C merges).
    int most = a.max_splits > 0 ? a.max_splits : int(gridDim.x) / a.n_kv_heads;
    const int wanted = (k.n_ctx + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
    if (wanted < most) most = wanted;
    if (most > kMaxMergeSplits) most = kMaxMergeSplits;
    k.splits = most < 1 ? 1 : most;
  }
  int mark = 0;
  unsigned long long target = 0;  // thread 0's next barrier count
  if (a.timeline != nullptr && k.tid == 0) {
    a.timeline[2 * blockIdx.x] = a.timeline[2 * blockIdx.x + 1] = global_timer();
  }
  ++mark;

  // Each phase's weight slices (and B's keys) are copied into shared memory
  // as soon as the stage they go to is free, one or two phases ahead (cp.async
  // groups, one committed at each arrow):
  //   F(l-1) -> B(l) keys and A(l) qkv rows (the wide stage);
  //   A -> C's o columns (mid);  C -> E's gate/up rows (wide);
  //   E -> F's down rows (mid).
  // at the start of the phase named first. A phase then waits for all but
  // the newest group. (Issuing them instead before the barrier ahead of that
  // phase measured slower: docs/benchmarks.md "session 37".) Units that do not fit are
  // L2-prefetched and read from global memory.
  enum Phase { kA, kC, kE, kF };
  auto stage = [&](Phase p, int layer) {
    if (a.stage) {
      if (p == kA) k.stage_o(meta->layers[layer & 1]);
      if (p == kC) k.stage_gate_up(meta->layers[layer & 1]);
      if (p == kE) k.stage_down(meta->layers[layer & 1]);
      if (p == kF && layer + 1 < a.n_layers) {
        k.stage_keys(meta->layers[(layer + 1) & 1]);
        k.stage_qkv_rows(meta->layers[(layer + 1) & 1]);
      }
    }
    ptx::cp_async_commit();
  };
  auto await_stage = [&]() {
    ptx::cp_async_wait<1>();
    __syncthreads();
  };
  if (a.stage) {
    k.stage_keys(meta->layers[0]);
    k.stage_qkv_rows(meta->layers[0]);
  }
  ptx::cp_async_commit();
  k.load_row(true);
  for (int layer = 0; layer < a.n_layers; ++layer) {
    const OneLaunchLayer& l = meta->layers[layer & 1];
    // The next layer's descriptor, into the other slot (read from F on).
    if (layer + 1 < a.n_layers) load_descriptor(meta, a.layers, layer + 1);
    // A (the residual is in `row`: the embedding, or loaded after F)
    stage(kA, layer);
    k.norm_row(l.attn_norm);
    await_stage();
    k.qkv_phase(l, layer);
    grid_barrier(a.barrier, a.timeline, mark, target);
    // B (its keys landed with A's rows)
    k.attention_phase(l);
    grid_barrier(a.barrier, a.timeline, mark, target);
    // C
    stage(kC, layer);
    await_stage();
    k.o_phase(l);
    grid_barrier(a.barrier, a.timeline, mark, target);
    // E
    stage(kE, layer);
    k.attention_residual(l);
    k.norm_row(l.ffn_norm);
    await_stage();
    k.gate_up_phase(l);
    grid_barrier(a.barrier, a.timeline, mark, target);
    // F
    stage(kF, layer);
    k.load_vector(a.act, a.inter);
    await_stage();
    k.down_phase(l);
    grid_barrier(a.barrier, a.timeline, mark, target);
    k.load_row(false);
  }
  if (blockIdx.x == 0) {
    k.norm_row(a.final_norm);
    const auto* v = reinterpret_cast<const uint4*>(k.vec());
    for (int i = k.tid; i < a.hidden / 8; i += kThreads) reinterpret_cast<uint4*>(a.out)[i] = v[i];
  }
}

}  // namespace

bool one_launch_decode_supported(int64_t hidden, int64_t inter, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim) {
  if (hidden <= 0 || inter <= 0 || n_heads <= 0 || n_kv_heads <= 0 || head_dim <= 0) return false;
  if (n_heads % n_kv_heads != 0 || n_heads / n_kv_heads > kMaxGroup) return false;
  // 16 to 128, a power of two: phase C's lane groups of D / 8.
  if (head_dim != 16 && head_dim != 32 && head_dim != 64 && head_dim != 128) return false;
  if (hidden % 8 != 0 || inter % 8 != 0) return false;
  return hidden <= kMaxHidden && inter <= kMaxVector && n_heads * head_dim <= kMaxVector;
}

namespace {

// Shared memory a CTA may have on this device (opt-in maximum).
int shared_memory_limit() {
  int device = 0, limit = 0;
  SS_CUDA_CHECK(cudaGetDevice(&device));
  SS_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return limit;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The stages of a launch: each phase's slices for the CTA with the most
// units, within what the device leaves beside the kernel's other shared
// memory (mid: the larger of C's and F's; wide: the rest, where A's rows
// take at most half).
void plan_stages(OneLaunchDecodeArgs& a, int32_t grid, size_t base) {
  const int64_t H = a.n_heads, Hkv = a.n_kv_heads, D = a.head_dim;
  const int64_t hidden = a.hidden, inter = a.inter;
  const int64_t qkv_units = (H + Hkv) * (D / 16) + Hkv * D / kUnitRows;
  const int64_t qkv = ceil_div(qkv_units, grid) * kUnitRows * hidden * 2;
  const int64_t row_blocks = std::max<int64_t>(1, grid / H);
  const int64_t o = ceil_div(H * row_blocks, grid) * ceil_div(hidden, row_blocks) * D * 2;
  const int64_t per_unit = kWarps / a.down_parts;
  const int64_t down = ceil_div(ceil_div(hidden, per_unit), grid) * per_unit * inter * 2;
  const int64_t budget = (int64_t(shared_memory_limit()) - int64_t(base)) / 16 * 16;
  const int64_t mid = std::min(std::max(o, down), budget / 2) / 16 * 16;
  const int64_t wide = budget - mid;
  a.stage_mid = static_cast<int32_t>(mid);
  a.stage_wide = static_cast<int32_t>(wide);
  a.stage_qkv = static_cast<int32_t>(std::min(qkv, wide / 2) / 16 * 16);
}

}  // namespace

int32_t one_launch_grid(int64_t hidden, int64_t inter, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim) {
  if (!one_launch_decode_supported(hidden, inter, n_heads, n_kv_heads, head_dim)) return 0;
  const size_t smem =
      layout_for(hidden, inter, n_heads, n_kv_heads, head_dim).total_bytes() + kMetaBytes;
  const int limit = shared_memory_limit();
  if (smem > size_t(limit)) return 0;
  // With the stages a CTA takes every byte the device allows it.
  SS_CUDA_CHECK(cudaFuncSetAttribute(one_launch_decode_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
  int blocks = 0;
  SS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, one_launch_decode_kernel,
                                                              kThreads, limit));
  if (blocks < 1) return 0;
  int device = 0, sms = 0;
  SS_CUDA_CHECK(cudaGetDevice(&device));
  SS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

size_t one_launch_partial_floats(int32_t grid, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim) {
  const int64_t group = n_heads / n_kv_heads;
  const int64_t splits = std::min<int64_t>(kKeyChunk, std::max<int64_t>(1, grid / n_kv_heads));
  return size_t(n_kv_heads * splits * group * (head_dim + 2));
}

int32_t one_launch_parts(int64_t rows, int32_t grid) {
  int parts = 1;
  while (parts < kWarps && (rows * parts * 2 + kWarps - 1) / kWarps <= grid) parts *= 2;
  return parts;
}

void one_launch_decode(const OneLaunchDecodeArgs& a, int32_t grid, cudaStream_t stream) {
  const bool ok =
      one_launch_decode_supported(a.hidden, a.inter, a.n_heads, a.n_kv_heads, a.head_dim) &&
      grid > 0 && a.layers != nullptr && a.n_layers > 0 && a.block_size > 0 && aligned16(a.act) &&
      aligned16(a.out) && aligned16(a.q) && aligned16(a.embed) && aligned16(a.o_partials) &&
      a.o_partials != nullptr && (a.down_parts & (a.down_parts - 1)) == 0 && a.down_parts >= 1 &&
      a.down_parts <= kWarps && a.max_splits >= 0 &&
      a.max_splits <= std::max<int32_t>(1, grid / a.n_kv_heads) && a.partials != nullptr &&
      a.barrier != nullptr;
  if (!ok) {
    fail_cuda("one_launch_decode", "unsupported operands (one_launch_decode_supported)", __FILE__,
              __LINE__);
  }
  OneLaunchDecodeArgs staged = a;
  const size_t base = base_bytes(a);
  plan_stages(staged, grid, base);
  const size_t smem = base + size_t(staged.stage_mid) + size_t(staged.stage_wide);
  SS_CUDA_CHECK(cudaFuncSetAttribute(one_launch_decode_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  one_launch_decode_kernel<<<grid, kThreads, smem, stream>>>(staged);
  SS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace specstack::cuda

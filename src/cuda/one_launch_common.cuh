// Device building blocks of the one-launch decode kernel
// (one_launch_decode.cu): its constants and shared-memory layout, the grid
// barrier, L2 prefetches and the GEMV dots against a
// vector in shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemv_rows.cuh"
#include "cuda/pdl.h"
#include "cuda/ptx_primitives.cuh"
#include "cuda/row_reduce.cuh"

namespace specstack::cuda::one_launch {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kUnitRows = kWarps;  // rows of a projection unit at one warp a row
constexpr int kKeyChunk = 128;     // keys of a split scored and summed per pass
constexpr int kMaxGroup = 16;      // query heads per kv head
constexpr int kMaxHeadDim = 128;
constexpr int kMinKeysPerSplit = 64;   // fewer keys a split than this only adds partials
constexpr int64_t kMaxVector = 32768;  // the longest input vector (bf16) in shared memory
constexpr int kMaxHidden = 4096;       // the residual row in registers: kRowValues a thread
constexpr int kRowValues = kMaxHidden / kThreads;
constexpr int kMaxMergeSplits = kKeyChunk;  // phase C keeps a split's weight a lane group
constexpr float kLog2e = 1.4426950408889634f;

// Shared memory: the phase's input vector, or (phase B) the attention tiles,
// then a small area of reductions and per-head statistics, then the weight
// stages (OneLaunchDecodeArgs::stage_mid, stage_wide).
struct Layout {
  size_t vector_bytes;  // bf16 [max(hidden, H * D, inter)]
  size_t tiles_bytes;   // f32 q [G, D], f32 scores [G, kKeyChunk], bf16 V [kKeyChunk, D], i32 slots
  size_t
      small_floats;  // reductions [kRowWarp], values [kUnitRows], m / l / corr [kMaxGroup], merge
  __host__ __device__ size_t union_bytes() const {
    const size_t big = vector_bytes > tiles_bytes ? vector_bytes : tiles_bytes;
    return (big + 15) / 16 * 16;
  }
  // The weight stages follow, 16-byte aligned.
  __host__ __device__ size_t total_bytes() const {
    return (union_bytes() + small_floats * 4 + 15) / 16 * 16;
  }
};

__host__ __device__ inline Layout layout_for(int64_t hidden, int64_t inter, int64_t n_heads,
                                             int64_t n_kv_heads, int64_t head_dim) {
  const int64_t group = n_heads / n_kv_heads;
  int64_t longest = hidden > inter ? hidden : inter;
  if (n_heads * head_dim > longest) longest = n_heads * head_dim;
  Layout l;
  l.vector_bytes = size_t(longest) * 2;
  l.tiles_bytes = size_t(group * head_dim) * 4 + size_t(group * kKeyChunk) * 4 +
                  size_t(kKeyChunk * head_dim) * 2 + size_t(kKeyChunk) * 4;
  // merge: split weights [kMaxMergeSplits], the head's output [kMaxHeadDim]
  // and its split groups' sums [kThreads / (D / 2), D] = 2 * kThreads.
  l.small_floats =
      kRowWarp + kUnitRows + 4 * kMaxGroup + 4 + kMaxMergeSplits + kMaxHeadDim + 2 * kThreads;
  return l;
}

__device__ __forceinline__ float bf(bf16 v) {
  return __bfloat162float(v);
}
// A projection's output as its bf16 value (the unfused kernels store bf16).
__device__ __forceinline__ float round_bf16(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Every CTA of the launch arrives, then leaves once all have: the counter
// only grows (each launch adds gridDim.x per barrier), so no reset between
// barriers or launches. The first barrier of a launch learns its target
// from the value its add returns; later ones add without waiting for the
// answer (target += gridDim.x). Release on the add, acquire on the polls,
// after and before the CTA's bar.sync: each CTA's writes before the barrier
// are visible to every CTA after it (CUTLASS's generic barrier does the
// same). With a timeline, every CTA records its arrival and its departure:
// [barrier][CTA][2]. `target` is thread 0's, 0 before the first barrier.
__device__ __forceinline__ void grid_barrier(unsigned long long* counter,
                                             unsigned long long* timeline, int& mark,
                                             unsigned long long& target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long* stamp =
        timeline != nullptr ? timeline + (int64_t(mark) * gridDim.x + blockIdx.x) * 2 : nullptr;
    if (stamp != nullptr) stamp[0] = global_timer();
    const unsigned long long one = 1;
    if (target == 0) {
      unsigned long long old = 0;
      asm volatile("atom.release.gpu.global.add.u64 %0, [%1], %2;"
                   : "=l"(old)
                   : "l"(counter), "l"(one)
                   : "memory");
      target = (old / gridDim.x + 1) * gridDim.x;
    } else {
      asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(counter), "l"(one) : "memory");
      target += gridDim.x;
    }
    unsigned long long now = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(now) : "l"(counter) : "memory");
    } while (now < target);
    if (stamp != nullptr) stamp[1] = global_timer();
  }
  ++mark;
  __syncthreads();
}

// L2 prefetch of `bytes` from p, the CTA's threads one 128-byte line each.
__device__ __forceinline__ void prefetch_bytes(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t off = size_t(threadIdx.x) * 128; off < bytes; off += size_t(kThreads) * 128) {
    prefetch_l2(c + off);
  }
}

// A weight vector from a stage (shared memory) or from global memory
// (streamed: evict-first).
template <bool kStaged>
__device__ __forceinline__ uint4 load_weights(const uint4* p) {
  if constexpr (kStaged) {
    return *p;
  } else {
    return __ldcs(p);
  }
}

// One warp's share (part of parts) of row w_row against the shared vector.
template <bool kStaged>
__device__ __forceinline__ float dot_shared(const bf16* vec, const bf16* w_row, int64_t vectors,
                                            int part, int parts, int lane) {
  const auto* w = reinterpret_cast<const uint4*>(w_row);
  const auto* x = reinterpret_cast<const uint4*>(vec);
  const int64_t stride = int64_t(32) * parts;
  float sum = 0.0f;
  int64_t v = int64_t(part) * 32 + lane;
  for (; v + stride * 3 < vectors; v += stride * 4) {
    uint4 wv[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) wv[u] = load_weights<kStaged>(w + v + stride * u);
#pragma unroll
    for (int u = 0; u < 4; ++u) gemv_rows::accumulate(wv[u], x[v + stride * u], sum);
  }
  for (; v < vectors; v += stride) gemv_rows::accumulate(load_weights<kStaged>(w + v), x[v], sum);
  return warp_sum(sum);
}

// Two rows at once (gate and up), their loads interleaved.
template <bool kStaged>
__device__ __forceinline__ float2 dot2_shared(const bf16* vec, const bf16* row_a, const bf16* row_b,
                                              int64_t vectors, int lane) {
  const auto* a = reinterpret_cast<const uint4*>(row_a);
  const auto* b = reinterpret_cast<const uint4*>(row_b);
  const auto* x = reinterpret_cast<const uint4*>(vec);
  float sa = 0.0f, sb = 0.0f;
  int64_t v = lane;
  for (; v + 32 < vectors; v += 64) {
    const uint4 a0 = load_weights<kStaged>(a + v), a1 = load_weights<kStaged>(a + v + 32);
    const uint4 b0 = load_weights<kStaged>(b + v), b1 = load_weights<kStaged>(b + v + 32);
    const uint4 x0 = x[v], x1 = x[v + 32];
    gemv_rows::accumulate(a0, x0, sa);
    gemv_rows::accumulate(b0, x0, sb);
    gemv_rows::accumulate(a1, x1, sa);
    gemv_rows::accumulate(b1, x1, sb);
  }
  for (; v < vectors; v += 32) {
    const uint4 xv = x[v];
    gemv_rows::accumulate(load_weights<kStaged>(a + v), xv, sa);
    gemv_rows::accumulate(load_weights<kStaged>(b + v), xv, sb);
  }
  return make_float2(warp_sum(sa), warp_sum(sb));
}

// Which of a CTA's units a phase stages in shared memory: a prefix of them,
// in unit order. The staging side and the consuming side make the same
// calls in the same order, so they agree on every offset.
struct StageCursor {
  int cap;
  int used = 0;
  bool open = true;
  __device__ explicit StageCursor(int capacity) : cap(capacity) {}
  // The unit's byte offset in the stage, or -1: not staged (nor any later unit).
  __device__ int take(int bytes) {
    if (!open || used + bytes > cap) {
      open = false;
      return -1;
    }
    const int at = used;
    used += bytes;
    return at;
  }
  // Up to `items` items of `item_bytes` each from the front of a unit: how
  // many fit (at *at); a unit cut short closes the stage.
  __device__ int take_items(int items, int item_bytes, int* at) {
    *at = used;
    const int fit = open ? (cap - used) / item_bytes : 0;
    const int n = items < fit ? items : fit;
    if (n < items) open = false;
    used += n * item_bytes;
    return n;
  }
};

// `bytes` (a multiple of 16) from global src to shared dst, 16 bytes a
// thread, asynchronously (the caller commits the group).
__device__ __forceinline__ void stage_copy(char* dst, const void* src, int64_t bytes) {
  const char* s = static_cast<const char*>(src);
  for (int64_t off = int64_t(threadIdx.x) * 16; off < bytes; off += int64_t(kThreads) * 16) {
    ptx::cp_async_16(dst + off, s + off, 16);
  }
}

}  // namespace specstack::cuda::one_launch

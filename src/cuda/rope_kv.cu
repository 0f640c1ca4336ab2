#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/fp8_device.cuh"
#include "cuda/pdl.h"
#include "cuda/rope_kv.h"

namespace specstack::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;
constexpr int64_t kTargetCtas = 264;  // 2 per SM of an H100

// gridDim.y CTAs per token (blockIdx.x = token): each puts cos/sin of its
// position in shared memory, then the (head, j) pairs of q and k are rotated
// one or two per thread, spread over the token's CTAs (k's also stored in the cache
// by the same thread), then v copied likewise; with scales and/or a bias,
// each element gets them first, rounded to bf16 as scale_outer_bf16 /
// add_bias_kernel round it. Several CTAs per token because a decode step has
// one token: on one CTA of 128 threads the 7B's 2048 pairs took 8.2 us (ncu,
// H100), a loop of 16 dependent round trips; every element is computed
// exactly as before.
// Element i of the row, read as v, with the step's scales and/or bias applied.
__device__ __forceinline__ float applied(float v, float rs, const QkvEpilogue& e, int64_t i) {
  if (e.col_scale != nullptr) {
    const float s = e.bias != nullptr ? fp8_dequant(v, rs, e.col_scale[i], e.bias[i])
                                      : fp8_dequant(v, rs, e.col_scale[i]);
    return __bfloat162float(__float2bfloat16(s));
  }
  return e.bias == nullptr ? v : __bfloat162float(__float2bfloat16(v + e.bias[i]));
}

// W consecutive bf16 (W = 1 or 2: one 2- or 4-byte access) from and to memory.
template <int W>
__device__ __forceinline__ void load_w(const bf16* p, float (&v)[W]) {
  if constexpr (W == 2) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    v[0] = f.x;
    v[1] = f.y;
  } else {
    v[0] = __bfloat162float(*p);
  }
}

template <int W>
__device__ __forceinline__ void store_w(bf16* p, const bf16 (&v)[W]) {
  if constexpr (W == 2) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __halves2bfloat162(v[0], v[1]);
  } else {
    *p = v[0];
  }
}

// W = 2 when head_dim % 4 == 0 and the row stride is even: a thread rotates two
// neighbouring (head, j) pairs with 4-byte accesses, the same arithmetic per
// element (prefill at 16K read and wrote ~1.3 TB/s with one pair a thread).
template <int W>
__global__ void __launch_bounds__(kThreads)
    rope_write_kv_kernel(bf16* qkv, int64_t ld, int32_t n_heads, int32_t n_kv_heads,
                         int32_t head_dim, const int32_t* positions, const float* inv_freq,
                         const int32_t* slot_mapping, bf16* k_cache, bf16* v_cache,
                         int32_t* slot_positions, QkvEpilogue epi) {
  // Before the wait: the angles and the slot come from the step's metadata
  // and the inverse frequencies, which no kernel of the step writes
  // (cuda/pdl.h), so they are ready when the previous kernel ends.
  extern __shared__ float cos_sin[];  // [2 * half]: cos | sin
  const int half = head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float s, c;
    sincosf(pos * inv_freq[j], &s, &c);  // fp32 angle, as torch and rope()
    cos_sin[j] = c;
    cos_sin[half + j] = s;
  }
  const int64_t slot = slot_mapping[t];
  pdl_begin();
  __syncthreads();
  const int64_t kv_width = static_cast<int64_t>(n_kv_heads) * head_dim;
  bf16* row = qkv + t * ld;  // q heads, then k heads, then v
  const float rs = epi.row_scale != nullptr ? epi.row_scale[t] : 1.0f;
  const int32_t rotated_heads = n_heads + n_kv_heads;
  const int first = blockIdx.y * blockDim.x + threadIdx.x;  // this thread's first item
  const int step = gridDim.y * blockDim.x;
  const int groups = half / W;  // items per head
  for (int p = first; p < rotated_heads * groups; p += step) {
    const int h = p / groups;
    const int j = (p - h * groups) * W;
    const int64_t i_lo = static_cast<int64_t>(h) * head_dim + j;
    float a[W], b[W];
    load_w<W>(row + i_lo, a);
    load_w<W>(row + i_lo + half, b);
    bf16 out_lo[W], out_hi[W];
#pragma unroll
    for (int e = 0; e < W; ++e) {
      const float x = applied(a[e], rs, epi, i_lo + e), y = applied(b[e], rs, epi, i_lo + half + e);
      const float c = cos_sin[j + e], s = cos_sin[half + j + e];
      // HF rotate_half: out = x * cos + cat(-x_hi, x_lo) * sin
      out_lo[e] = __float2bfloat16(x * c - y * s);
      out_hi[e] = __float2bfloat16(y * c + x * s);
    }
    store_w<W>(row + i_lo, out_lo);
    store_w<W>(row + i_lo + half, out_hi);
    if (h >= n_heads && slot >= 0) {
      bf16* dst = k_cache + slot * kv_width + static_cast<int64_t>(h - n_heads) * head_dim + j;
      store_w<W>(dst, out_lo);
      store_w<W>(dst + half, out_hi);
    }
  }
  const int64_t v0 = static_cast<int64_t>(rotated_heads) * head_dim;
  const int64_t v_items = kv_width / W;
  if (epi.bias != nullptr || epi.col_scale != nullptr) {  // the row's v as the passes leave it
    for (int64_t i = first; i < v_items; i += step) {
      float x[W];
      bf16 y[W];
      load_w<W>(row + v0 + i * W, x);
#pragma unroll
      for (int e = 0; e < W; ++e) y[e] = __float2bfloat16(applied(x[e], rs, epi, v0 + i * W + e));
      store_w<W>(row + v0 + i * W, y);
    }
  }
  if (slot >= 0) {
    for (int64_t i = first; i < v_items; i += step) {
      if constexpr (W == 2) {
        reinterpret_cast<__nv_bfloat162*>(v_cache + slot * kv_width)[i] =
            reinterpret_cast<const __nv_bfloat162*>(row + v0)[i];
      } else {
        v_cache[slot * kv_width + i] = row[v0 + i];
      }
    }
    if (first == 0) slot_positions[slot] = positions[t];
  }
}

}  // namespace

void rope_write_kv(bf16* qkv, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t n_kv_heads,
                   int32_t head_dim, const int32_t* positions, const float* inv_freq,
                   const int32_t* slot_mapping, bf16* k_cache, bf16* v_cache,
                   int32_t* slot_positions, const float* qkv_bias, cudaStream_t stream) {
  QkvEpilogue epilogue;
  epilogue.bias = qkv_bias;
  rope_write_kv(qkv, n_tokens, ld, n_heads, n_kv_heads, head_dim, positions, inv_freq, slot_mapping,
                k_cache, v_cache, slot_positions, epilogue, stream);
}

void rope_write_kv(bf16* qkv, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t n_kv_heads,
                   int32_t head_dim, const int32_t* positions, const float* inv_freq,
                   const int32_t* slot_mapping, bf16* k_cache, bf16* v_cache,
                   int32_t* slot_positions, const QkvEpilogue& epilogue, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  SS_CHECK((epilogue.row_scale == nullptr) == (epilogue.col_scale == nullptr));
  SS_CHECK(head_dim > 0 && head_dim % 2 == 0);
  SS_CHECK_GE(ld, static_cast<int64_t>(n_heads + 2 * n_kv_heads) * head_dim);
  const size_t smem = static_cast<size_t>(head_dim) * sizeof(float);
  // CTAs per token: enough for one pair per thread, but no more than needed
  // to give the GPU ~2 CTAs per SM (prefill: one per token, as before).
  // Two pairs a thread where every access stays 4-byte aligned (the cache
  // rows and heads are then even too: head_dim % 4 == 0).
  const bool two = head_dim % 4 == 0 && ld % 2 == 0 && reinterpret_cast<uintptr_t>(qkv) % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(k_cache) % 4 == 0 &&
                   reinterpret_cast<uintptr_t>(v_cache) % 4 == 0;
  const int64_t items = int64_t(n_heads + n_kv_heads) * (head_dim / 2) / (two ? 2 : 1);
  const int64_t per_token =
      std::max<int64_t>(1, std::min((items + kThreads - 1) / kThreads, kTargetCtas / n_tokens));
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(per_token));
  launch_pdl(two ? rope_write_kv_kernel<2> : rope_write_kv_kernel<1>, grid, kThreads, smem, stream,
             true, qkv, ld, n_heads, n_kv_heads, head_dim, positions, inv_freq, slot_mapping,
             k_cache, v_cache, slot_positions, epilogue);
}

}  // namespace specstack::cuda

#include <algorithm>

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
// one per thread, spread over the token's CTAs (k's also stored in the cache
// by the same thread), then v copied likewise; with scales and/or a bias,
// each element gets them first, rounded to bf16 as scale_outer_bf16 /
// add_bias_kernel round it. Several CTAs per token because a decode step has
// one token: on one CTA of 128 threads the 7B's 2048 pairs took 8.2 us (ncu,
// H100), a loop of 16 dependent round trips; every element is computed
// exactly as before.
__device__ __forceinline__ float loaded(const bf16* x, float rs, const QkvEpilogue& e, int64_t i) {
  const float v = __bfloat162float(x[i]);
  if (e.col_scale != nullptr) {
    const float s = e.bias != nullptr ? fp8_dequant(v, rs, e.col_scale[i], e.bias[i])
                                      : fp8_dequant(v, rs, e.col_scale[i]);
    return __bfloat162float(__float2bfloat16(s));
  }
  return e.bias == nullptr ? v : __bfloat162float(__float2bfloat16(v + e.bias[i]));
}

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
  for (int p = first; p < rotated_heads * half; p += step) {
    const int h = p / half;
    const int j = p - h * half;
    const int64_t i_lo = static_cast<int64_t>(h) * head_dim + j;
    bf16* lo = row + i_lo;
    bf16* hi = lo + half;
    const float a = loaded(row, rs, epi, i_lo), b = loaded(row, rs, epi, i_lo + half);
    const float c = cos_sin[j], s = cos_sin[half + j];
    // HF rotate_half: out = x * cos + cat(-x_hi, x_lo) * sin
    const bf16 out_lo = __float2bfloat16(a * c - b * s);
    const bf16 out_hi = __float2bfloat16(b * c + a * s);
    *lo = out_lo;
    *hi = out_hi;
    if (h >= n_heads && slot >= 0) {
      bf16* dst = k_cache + slot * kv_width + static_cast<int64_t>(h - n_heads) * head_dim + j;
      dst[0] = out_lo;
      dst[half] = out_hi;
    }
  }
  const int64_t v0 = static_cast<int64_t>(rotated_heads) * head_dim;
  if (epi.bias != nullptr || epi.col_scale != nullptr) {  // the row's v as the passes leave it
    for (int64_t i = first; i < kv_width; i += step)
      row[v0 + i] = __float2bfloat16(loaded(row, rs, epi, v0 + i));
  }
  if (slot >= 0) {
    for (int64_t i = first; i < kv_width; i += step) v_cache[slot * kv_width + i] = row[v0 + i];
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
  const int64_t pairs = int64_t(n_heads + n_kv_heads) * (head_dim / 2);
  const int64_t per_token =
      std::max<int64_t>(1, std::min((pairs + kThreads - 1) / kThreads, kTargetCtas / n_tokens));
  const dim3 grid(static_cast<unsigned>(n_tokens), static_cast<unsigned>(per_token));
  launch_pdl(rope_write_kv_kernel, grid, kThreads, smem, stream, true, qkv, ld, n_heads, n_kv_heads,
             head_dim, positions, inv_freq, slot_mapping, k_cache, v_cache, slot_positions,
             epilogue);
}

}  // namespace specstack::cuda

#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/gemv_reduce.cuh"
#include "cuda/gemv_rows.cuh"
#include "cuda/pdl.h"
#include "cuda/qkv_rope_gemv.h"

namespace specstack::cuda {

namespace {

using namespace gemv_rows;  // NOLINT: the shared row dots
using bf16 = __nv_bfloat16;

constexpr int kSplit = 4;           // warps per row, as the one-row GEMVs at these widths
constexpr int kWarps = 2 * kSplit;  // a pair of rows per CTA
constexpr int kThreads = kWarps * 32;

// Grid: one CTA per pair, the (n_heads + n_kv_heads) * D / 2 rotated pairs
// first, then the n_kv_heads * D / 2 pairs of v rows.
template <bool kFp8>
__global__ void __launch_bounds__(kThreads) qkv_rope_gemv_kernel(const QkvRopeArgs a) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int half = a.head_dim / 2;
  const int64_t kv_width = int64_t{a.n_kv_heads} * a.head_dim;
  const int64_t v0 = int64_t{a.n_heads + a.n_kv_heads} * a.head_dim;
  const int64_t rotated_pairs = int64_t{a.n_heads + a.n_kv_heads} * half;
  const int64_t p = blockIdx.x;
  const bool rotate = p < rotated_pairs;
  const int64_t h = rotate ? p / half : 0;
  const int j = rotate ? static_cast<int>(p % half) : 0;
  const int64_t lo = rotate ? h * a.head_dim + j : v0 + 2 * (p - rotated_pairs);
  const int64_t hi = rotate ? lo + half : lo + 1;
  const int64_t my_row = warp < kSplit ? lo : hi;
  const int part = warp % kSplit;
  const int64_t vectors = kFp8 ? a.in / 16 : a.in / 8;
  const auto* w_row = kFp8 ? reinterpret_cast<const uint4*>(a.w8 + my_row * a.in)
                           : reinterpret_cast<const uint4*>(a.w16 + my_row * a.in);

  // Before the wait (cuda/pdl.h): weights, bias, scales, the step's metadata.
  prefetch_first<kSplit>(w_row, vectors, part, lane);
  float scale_lo = 1.0f, scale_hi = 1.0f, bias_lo = 0.0f, bias_hi = 0.0f, c = 1.0f, s = 0.0f;
  int32_t position = 0;
  int64_t slot = -1;
  if (threadIdx.x == 0) {
    if (kFp8) {
      scale_lo = a.w_scale[lo];
      scale_hi = a.w_scale[hi];
    }
    if (a.bias != nullptr) {
      bias_lo = a.bias[lo];
      bias_hi = a.bias[hi];
    }
    position = a.position[0];
    slot = a.slot[0];
    if (rotate) {
      // fp32 angle, as torch and rope_write_kv
      sincosf(static_cast<float>(position) * a.inv_freq[j], &s, &c);
    }
  }
  pdl_begin();

  float sum[1];
  if constexpr (kFp8) {
    sum[0] = 0.0f;
    fp8_row_dots<1, kSplit>(a.x, a.in, w_row, vectors, part, lane, sum);
  } else {
    sum[0] = bf16_row_dot<kSplit>(a.x, w_row, vectors, part, lane);
  }
  reduce_parts<kWarps, kSplit>(sum, warp, lane);  // rows' totals in warps 0 and kSplit
  __shared__ float hi_sum;
  if (warp == kSplit && lane == 0) hi_sum = sum[0];
  __syncthreads();
  if (threadIdx.x != 0) return;
  // The GEMVs' epilogues: bf16(sum + bias), FP8 bf16(sum * scale + bias).
  const bf16 y_lo = __float2bfloat16(kFp8 ? sum[0] * scale_lo + bias_lo : sum[0] + bias_lo);
  const bf16 y_hi = __float2bfloat16(kFp8 ? hi_sum * scale_hi + bias_hi : hi_sum + bias_hi);
  if (rotate) {
    // rope_write_kv's HF rotate_half on the bf16 values.
    const float x_lo = __bfloat162float(y_lo), x_hi = __bfloat162float(y_hi);
    const bf16 out_lo = __float2bfloat16(x_lo * c - x_hi * s);
    const bf16 out_hi = __float2bfloat16(x_hi * c + x_lo * s);
    a.qkv[lo] = out_lo;
    a.qkv[hi] = out_hi;
    if (h >= a.n_heads && slot >= 0) {
      bf16* dst = a.k_cache + slot * kv_width + (h - a.n_heads) * a.head_dim + j;
      dst[0] = out_lo;
      dst[half] = out_hi;
    }
  } else {
    a.qkv[lo] = y_lo;
    a.qkv[hi] = y_hi;
    if (slot >= 0) {
      a.v_cache[slot * kv_width + (lo - v0)] = y_lo;
      a.v_cache[slot * kv_width + (hi - v0)] = y_hi;
    }
  }
  if (p == 0 && slot >= 0) a.slot_positions[slot] = position;
}

}  // namespace

bool qkv_rope_gemv_supported(const QkvRopeArgs& a) {
  const bool bf16_weights =
      a.w16 != nullptr && a.w8 == nullptr && a.in % 8 == 0 && aligned16(a.w16);
  const bool fp8_weights = a.w8 != nullptr && a.w16 == nullptr && a.w_scale != nullptr &&
                           a.in % 16 == 0 && aligned16(a.w8);
  return (bf16_weights || fp8_weights) && aligned16(a.x) && a.in > 0 && a.head_dim > 0 &&
         a.head_dim % 2 == 0 && a.n_heads > 0 && a.n_kv_heads > 0;
}

void qkv_rope_gemv(const QkvRopeArgs& a, cudaStream_t stream) {
  if (!qkv_rope_gemv_supported(a)) {
    fail_cuda("qkv_rope_gemv", "unsupported operands (qkv_rope_gemv_supported)", __FILE__,
              __LINE__);
  }
  const int64_t pairs = int64_t{a.n_heads + 2 * a.n_kv_heads} * (a.head_dim / 2);
  const dim3 grid(static_cast<unsigned>(pairs));
  if (a.w8 != nullptr) {
    launch_pdl(qkv_rope_gemv_kernel<true>, grid, dim3(kThreads), 0, stream, true, a);
  } else {
    launch_pdl(qkv_rope_gemv_kernel<false>, grid, dim3(kThreads), 0, stream, true, a);
  }
}

}  // namespace specstack::cuda

// Device helpers shared by the decode GEMV kernels (gemv.cu, fp8_gemv.cu,
// qkv_rope_gemv.cu): one warp's share of the dot product of an input row with
// one weight row. Lanes stride over the row in 16-byte vectors (8 bf16 or 16
// e4m3 weights), kUnroll loads in flight, then a warp reduction (every lane
// ends with the warp's total). Warp `part` of kSplit takes vectors part * 32 +
// lane, stepping 32 * kSplit: with kSplit > 1 a long row's loads are spread
// over more warps. A row's sum depends only on kSplit, so kernels that share
// these helpers and the split produce the same bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/pdl.h"

namespace specstack::cuda::gemv_rows {

constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

__device__ inline void accumulate(const uint4& w, const uint4& x, float& sum) {
  const auto* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 wf = __bfloat1622float2(w2[i]);
    const float2 xf = __bfloat1622float2(x2[i]);
    sum = fmaf(wf.x, xf.x, sum);
    sum = fmaf(wf.y, xf.y, sum);
  }
}

// One row of x against kSplit warps' share of weight row w_row: lanes stride
// over the row in 8-element (16-byte) vectors, kUnroll loads in flight, then
// a warp reduction (every lane ends with the warp's total). Warp `part` of
// the kSplit takes vectors part * 32 + lane, stepping 32 * kSplit: with
// kSplit > 1 a long row's loads are spread over more warps, so fewer
// round trips to memory run one after another (the small draft's long rows).
template <int kSplit>
__device__ inline float bf16_row_dot(const __nv_bfloat16* __restrict__ x,
                                     const uint4* __restrict__ w_row, int64_t vectors, int part,
                                     int lane) {
  constexpr int64_t kStride = 32 * kSplit;
  const auto* xv = reinterpret_cast<const uint4*>(x);
  float sum = 0.0f;
  int64_t v = int64_t(part) * 32 + lane;
  // Main loop: kUnroll independent weight loads before their first use.
  for (; v + kStride * (kUnroll - 1) < vectors; v += kStride * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w_row + v + kStride * u);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) accumulate(wv[u], __ldg(xv + v + kStride * u), sum);
  }
  for (; v < vectors; v += kStride) accumulate(__ldcs(w_row + v), __ldg(xv + v), sum);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  return sum;
}

// Before pdl_begin: L2 prefetch of the weight vectors a row dot's first
// unrolled iteration loads (this warp's share of w_row). The lines are in
// L2 by the time the previous kernel is done; always safe, as L2 is where
// the previous kernel's writes land too (cuda/pdl.h).
template <int kSplit>
__device__ inline void prefetch_first(const uint4* w_row, int64_t vectors, int part, int lane) {
  constexpr int64_t kStride = 32 * kSplit;
  const int64_t v0 = int64_t(part) * 32 + lane;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (v0 + kStride * u < vectors) prefetch_l2(w_row + v0 + kStride * u);
  }
}

// 16 e4m3 weights (one 16-byte load) to f32.
__device__ inline void fp8x16_to_float(const uint4& packed, float (&w)[16]) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&packed);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pairs[i], __NV_E4M3));
    const float2 f = __half22float2(h);
    w[2 * i] = f.x;
    w[2 * i + 1] = f.y;
  }
}

// sum += w[0..16) · x[0..16) (x: 16 bf16 at a 16-byte aligned address).
__device__ inline float dot16(const float (&w)[16], const uint4* __restrict__ x, float sum) {
  const uint4 a = __ldg(x), b = __ldg(x + 1);
  const auto* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
  const auto* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a2[i]);
    const float2 fb = __bfloat1622float2(b2[i]);
    sum = fmaf(w[2 * i], fa.x, sum);
    sum = fmaf(w[2 * i + 1], fa.y, sum);
    sum = fmaf(w[8 + 2 * i], fb.x, sum);
    sum = fmaf(w[8 + 2 * i + 1], fb.y, sum);
  }
  return sum;
}

// kRows dot products of x's rows with one weight row (16-byte vectors of 16
// weights), this warp's share of kSplit, warp-reduced into sum[] (every lane).
template <int kRows, int kSplit>
__device__ inline void fp8_row_dots(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                                    const uint4* __restrict__ w_row, int64_t vectors, int part,
                                    int lane, float (&sum)[kRows]) {
  constexpr int64_t kStride = 32 * kSplit;
  int64_t v = int64_t(part) * 32 + lane;
  auto consume = [&](const uint4& packed, int64_t at) {
    float w[16];
    fp8x16_to_float(packed, w);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      sum[r] = dot16(w, reinterpret_cast<const uint4*>(x + r * ldx) + 2 * at, sum[r]);
    }
  };
  for (; v + kStride * (kUnroll - 1) < vectors; v += kStride * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w_row + v + kStride * u);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) consume(wv[u], v + kStride * u);
  }
  for (; v < vectors; v += kStride) consume(__ldcs(w_row + v), v);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], offset);
    }
  }
}

}  // namespace specstack::cuda::gemv_rows

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/gemv.h"

namespace specstack::cuda {

namespace {

// 4 warps (rows) per block: a 3584-row matrix makes 896 blocks, ~6.8 per SM
// of an H100, so the last wave is nearly full (8 rows per block left SMs
// with 4 vs 3 blocks: ~85% of bandwidth on the o / down projections).
constexpr int kWarpsPerBlock = 4;
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

// One warp per output row r: lanes stride over the row in 8-element (16-byte)
// vectors, N input rows accumulate side by side, then a warp reduction.
// sum[i] = x[i] · w_row for the N input rows, reduced across the warp (every
// lane ends with the totals).
template <int N>
__device__ inline void row_dot(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                               const uint4* __restrict__ w_row, int64_t vectors, int lane,
                               float (&sum)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) sum[i] = 0.0f;

  int64_t v = lane;
  // Main loop: kUnroll independent weight loads before their first use.
  for (; v + 32 * (kUnroll - 1) < vectors; v += 32 * kUnroll) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w_row + v + 32 * u);  // streamed once
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + i * ldx) + v + 32 * u);
        accumulate(wv[u], xv, sum[i]);
      }
    }
  }
  for (; v < vectors; v += 32) {
    const uint4 wv = __ldcs(w_row + v);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      accumulate(wv, __ldg(reinterpret_cast<const uint4*>(x + i * ldx) + v), sum[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], offset);
    }
  }
}

template <int N>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                const __nv_bfloat16* __restrict__ w, int64_t out, int64_t in,
                __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32, int64_t ldy,
                const float* __restrict__ bias) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= out) return;
  float sum[N];
  row_dot<N>(x, ldx, reinterpret_cast<const uint4*>(w + row * in), in / 8, lane, sum);
  if (lane == 0) {
    const float b = bias != nullptr ? bias[row] : 0.0f;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (y_f32 != nullptr) {
        y_f32[i * ldy + row] = sum[i] + b;
      } else {
        y[i * ldy + row] = __float2bfloat16(sum[i] + b);
      }
    }
  }
}

// Rows r and width + r of the fused gate/up weight in one warp.
template <int N>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_silu_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                     const __nv_bfloat16* __restrict__ w, int64_t width, int64_t in,
                     __nv_bfloat16* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= width) return;
  float gate[N], up[N];
  row_dot<N>(x, ldx, reinterpret_cast<const uint4*>(w + row * in), in / 8, lane, gate);
  row_dot<N>(x, ldx, reinterpret_cast<const uint4*>(w + (width + row) * in), in / 8, lane, up);
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float g = gate[i];
      y[i * width + row] = __float2bfloat16(g / (1.0f + expf(-g)) * up[i]);
    }
  }
}

template <int N>
void launch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t out, int64_t in,
            __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (silu) {
    gemv_silu_kernel<N><<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, ldx, w, out, in, y);
  } else {
    gemv_kernel<N>
        <<<blocks, kWarpsPerBlock * 32, 0, stream>>>(x, ldx, w, out, in, y, y_f32, ldy, bias);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void dispatch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
              cudaStream_t stream) {
  switch (n) {
    case 1:
      return launch<1>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 2:
      return launch<2>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 3:
      return launch<3>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 4:
      return launch<4>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 5:
      return launch<5>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 6:
      return launch<6>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 7:
      return launch<7>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    case 8:
      return launch<8>(x, ldx, w, out, in, y, y_f32, ldy, bias, silu, stream);
    default:
      break;
  }
  fail_cuda("gemv", "n out of range", __FILE__, __LINE__);
}

}  // namespace

bool gemv_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t in) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n >= 1 && n <= kGemvMaxRows && in % 8 == 0 && ldx % 8 == 0 && aligned(x) && aligned(w);
}

void gemv(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
          int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, cudaStream_t stream,
          const float* bias) {
  dispatch(x, ldx, w, n, out, in, y, y_f32, ldy, bias, false, stream);
}

void gemv_silu_mul(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w_gate_up, int64_t n,
                   int64_t width, int64_t in, __nv_bfloat16* y, cudaStream_t stream) {
  dispatch(x, ldx, w_gate_up, n, width, in, y, nullptr, width, nullptr, true, stream);
}

}  // namespace specstack::cuda

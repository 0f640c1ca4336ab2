#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/gemv.h"
#include "cuda/gemv_mma.h"
#include "cuda/gemv_reduce.cuh"
#include "cuda/gemv_rows.cuh"
#include "cuda/pdl.h"

namespace specstack::cuda {

namespace {

using namespace gemv_rows;  // NOLINT: the shared row dots

// 4 warps (rows) per block: a 3584-row matrix makes 896 blocks, ~6.8 per SM
// of an H100, so the last wave is nearly full (8 rows per block left SMs
// with 4 vs 3 blocks: ~85% of bandwidth on the o / down projections).
constexpr int kWarpsPerBlock = 4;

// One input row: kSplit warps per output row, kWarpsPerBlock / kSplit rows
// per block.
template <int kSplit>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                int64_t out, int64_t in, __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32,
                const float* __restrict__ bias) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t(blockIdx.x) * (kWarpsPerBlock / kSplit) + warp / kSplit;
  const bool valid = row < out;  // no early return: the block reduction syncs
  float b = 0.0f;                // the bias, a weight: loaded before the wait (cuda/pdl.h)
  if (valid) {
    prefetch_first<kSplit>(reinterpret_cast<const uint4*>(w + row * in), in / 8, warp % kSplit,
                           lane);
    if (bias != nullptr && lane == 0 && warp % kSplit == 0) b = bias[row];
  }
  pdl_begin();
  float sum[1] = {0.0f};
  if (valid) {
    sum[0] = bf16_row_dot<kSplit>(x, reinterpret_cast<const uint4*>(w + row * in), in / 8,
                                  warp % kSplit, lane);
  }
  reduce_parts<kWarpsPerBlock, kSplit>(sum, warp, lane);
  if (valid && lane == 0 && warp % kSplit == 0) {
    const float value = sum[0] + b;
    if (y_f32 != nullptr) {
      y_f32[row] = value;
    } else {
      y[row] = __float2bfloat16(value);
    }
  }
}

// Rows r and width + r of the fused gate/up weight in the same warps.
template <int kSplit>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    gemv_silu_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                     int64_t width, int64_t in, __nv_bfloat16* __restrict__ y) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t(blockIdx.x) * (kWarpsPerBlock / kSplit) + warp / kSplit;
  const bool valid = row < width;
  // The gate row only: both rows' first loads of a whole resident wave
  // (7B: ~2100 blocks x 8 KB) would crowd L2.
  if (valid) {
    prefetch_first<kSplit>(reinterpret_cast<const uint4*>(w + row * in), in / 8, warp % kSplit,
                           lane);
  }
  pdl_begin();
  float gate_up[2] = {0.0f, 0.0f};
  if (valid) {
    const int part = warp % kSplit;
    gate_up[0] =
        bf16_row_dot<kSplit>(x, reinterpret_cast<const uint4*>(w + row * in), in / 8, part, lane);
    gate_up[1] = bf16_row_dot<kSplit>(x, reinterpret_cast<const uint4*>(w + (width + row) * in),
                                      in / 8, part, lane);
  }
  reduce_parts<kWarpsPerBlock, kSplit>(gate_up, warp, lane);
  if (valid && lane == 0 && warp % kSplit == 0) {
    const float g = gate_up[0];
    y[row] = __float2bfloat16(g / (1.0f + expf(-g)) * gate_up[1]);
  }
}

template <int kSplit>
void launch(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t out, int64_t in,
            __nv_bfloat16* y, float* y_f32, const float* bias, bool silu, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpsPerBlock / kSplit;
  const auto blocks = static_cast<unsigned>((out + kRowsPerBlock - 1) / kRowsPerBlock);
  if (silu) {
    launch_pdl(gemv_silu_kernel<kSplit>, blocks, kWarpsPerBlock * 32, 0, stream, true, x, w, out,
               in, y);
  } else {
    launch_pdl(gemv_kernel<kSplit>, blocks, kWarpsPerBlock * 32, 0, stream, true, x, w, out, in, y,
               y_f32, bias);
  }
}

// Warps per output row for one input row (bench/gemv_bench on the H100, see
// docs/benchmarks.md): the layer projections 4 (0.5B down 8.7 -> 5.3 us,
// 7B qkv 15.6 -> 13.0 us), a small gate/up 2, the wide gate/up and the LM
// head 1 (enough rows to fill the GPU one warp each).
int default_split(int64_t out, bool silu) {
  if (out > 8192) return 1;
  return silu ? 2 : 4;
}

void launch_one_row(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t out, int64_t in,
                    __nv_bfloat16* y, float* y_f32, const float* bias, bool silu, int split,
                    cudaStream_t stream) {
  switch (split) {
    case 1:
      return launch<1>(x, w, out, in, y, y_f32, bias, silu, stream);
    case 2:
      return launch<2>(x, w, out, in, y, y_f32, bias, silu, stream);
    case 4:
      return launch<4>(x, w, out, in, y, y_f32, bias, silu, stream);
    default:
      break;
  }
  fail_cuda("gemv", "split must be 1, 2 or 4", __FILE__, __LINE__);
}

void dispatch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
              cudaStream_t stream) {
  if (n == 1)
    return launch_one_row(x, w, out, in, y, y_f32, bias, silu, default_split(out, silu), stream);
  // 2..8 rows: a warp-per-row kernel's cost grows with the rows (every row
  // converted and multiplied on the CUDA cores per weight element); the
  // tensor-core one reads the weights once at about one row's cost.
  if (n >= 2 && n <= kGemvMaxRows) {
    return gemv_mma(x, ldx, w, n, out, in, y, y_f32, ldy, bias, silu, stream);
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

namespace specstack::cuda {

void gemv_one_row(const __nv_bfloat16* x, const __nv_bfloat16* w, int64_t out, int64_t in,
                  __nv_bfloat16* y, float* y_f32, const float* bias, bool silu, int split,
                  cudaStream_t stream) {
  launch_one_row(x, w, out, in, y, y_f32, bias, silu, split, stream);
}

}  // namespace specstack::cuda

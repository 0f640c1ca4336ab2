#include <cuda_fp16.h>

#include "cuda/cuda_check.h"
#include "cuda/fp8_gemv.h"
#include "cuda/gemv_reduce.cuh"
#include "cuda/gemv_rows.cuh"
#include "cuda/pdl.h"

namespace specstack::cuda {

namespace {

using namespace gemv_rows;  // NOLINT: the shared row dots

// 4 warps per block as in gemv.cu (a 3584-row matrix fills the last wave).
constexpr int kWarpsPerBlock = 4;

// out rows (silu: `out` = width, rows r and width + r), kWarpsPerBlock /
// kSplit of them per block.
template <int kRows, int kSplit, bool kSilu>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    fp8_gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, const fp8* __restrict__ w8,
                    const float* __restrict__ w_scale, int64_t out, int64_t in,
                    __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32, int64_t ldy,
                    const float* __restrict__ bias) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = int64_t(blockIdx.x) * (kWarpsPerBlock / kSplit) + warp / kSplit;
  const bool valid = row < out;  // no early return: the block reduction syncs
  // The epilogue's scales and bias are weights (read before the wait,
  // cuda/pdl.h): the last block's tail then has no dependent load left.
  float scale = 0.0f, second_scale = 0.0f;  // second: SiLU's up row, else the bias
  if (valid) {                              // the first (gate) row only, as gemv.cu
    prefetch_first<kSplit>(reinterpret_cast<const uint4*>(w8 + row * in), in / 16, warp % kSplit,
                           lane);
    if (lane == 0 && warp % kSplit == 0) {
      scale = w_scale[row];
      second_scale = kSilu ? w_scale[out + row] : (bias != nullptr ? bias[row] : 0.0f);
    }
  }
  pdl_begin();
  constexpr int kValues = kSilu ? 2 * kRows : kRows;
  float sum[kValues] = {};
  if (valid) {
    const int part = warp % kSplit;
    float first[kRows] = {};
    fp8_row_dots<kRows, kSplit>(x, ldx, reinterpret_cast<const uint4*>(w8 + row * in), in / 16,
                                part, lane, first);
#pragma unroll
    for (int r = 0; r < kRows; ++r) sum[r] = first[r];
    if constexpr (kSilu) {
      float second[kRows] = {};
      fp8_row_dots<kRows, kSplit>(x, ldx, reinterpret_cast<const uint4*>(w8 + (out + row) * in),
                                  in / 16, part, lane, second);
#pragma unroll
      for (int r = 0; r < kRows; ++r) sum[kRows + r] = second[r];
    }
  }
  reduce_parts<kWarpsPerBlock, kSplit>(sum, warp, lane);
  if (!valid || lane != 0 || warp % kSplit != 0) return;
  if constexpr (kSilu) {
    const float up_scale = second_scale;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float g = sum[r] * scale;
      y[r * ldy + row] = __float2bfloat16(g / (1.0f + expf(-g)) * (sum[kRows + r] * up_scale));
    }
  } else {
    const float b = second_scale;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float value = sum[r] * scale + b;
      if (y_f32 != nullptr) {
        y_f32[r * ldy + row] = value;
      } else {
        y[r * ldy + row] = __float2bfloat16(value);
      }
    }
  }
}

struct Args {
  const __nv_bfloat16* x;
  int64_t ldx;
  const fp8* w8;
  const float* w_scale;
  int64_t out, in;
  __nv_bfloat16* y;
  float* y_f32;
  int64_t ldy;
  const float* bias;
};

template <int kRows, int kSplit, bool kSilu>
void launch(const Args& a, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpsPerBlock / kSplit;
  const auto blocks = static_cast<unsigned>((a.out + kRowsPerBlock - 1) / kRowsPerBlock);
  launch_pdl(fp8_gemv_kernel<kRows, kSplit, kSilu>, blocks, kWarpsPerBlock * 32, 0, stream, true,
             a.x, a.ldx, a.w8, a.w_scale, a.out, a.in, a.y, a.y_f32, a.ldy, a.bias);
}

// One input row: warps per output row by the output count, as gemv.cu's
// default_split (short matrices spread each row's loads over more warps).
template <bool kSilu>
void launch_one_row(const Args& a, cudaStream_t stream) {
  if (a.out > 8192) return launch<1, 1, kSilu>(a, stream);
  if (kSilu) return launch<1, 2, kSilu>(a, stream);
  launch<1, 4, kSilu>(a, stream);
}

template <bool kSilu>
void dispatch(const Args& a, int64_t n, cudaStream_t stream) {
  switch (n) {
    case 1:
      return launch_one_row<kSilu>(a, stream);
    case 2:
      return launch<2, 1, kSilu>(a, stream);
    case 3:
      return launch<3, 1, kSilu>(a, stream);
    case 4:
      return launch<4, 1, kSilu>(a, stream);
    case 5:
      return launch<5, 1, kSilu>(a, stream);
    case 6:
      return launch<6, 1, kSilu>(a, stream);
    case 7:
      return launch<7, 1, kSilu>(a, stream);
    case 8:
      return launch<8, 1, kSilu>(a, stream);
    default:
      break;
  }
  fail_cuda("fp8_gemv", "n out of range", __FILE__, __LINE__);
}

}  // namespace

bool fp8_gemv_supported(const void* x, int64_t ldx, const void* w8, int64_t n, int64_t in) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return n >= 1 && n <= kFp8GemvMaxRows && in % 16 == 0 && ldx % 8 == 0 && aligned(x) &&
         aligned(w8);
}

void fp8_gemv(const __nv_bfloat16* x, int64_t ldx, const fp8* w8, const float* w_scale, int64_t n,
              int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
              const float* bias, cudaStream_t stream) {
  dispatch<false>(Args{x, ldx, w8, w_scale, out, in, y, y_f32, ldy, bias}, n, stream);
}

void fp8_gemv_silu_mul(const __nv_bfloat16* x, int64_t ldx, const fp8* w8, const float* w_scale,
                       int64_t n, int64_t width, int64_t in, __nv_bfloat16* y,
                       cudaStream_t stream) {
  dispatch<true>(Args{x, ldx, w8, w_scale, width, in, y, nullptr, width, nullptr}, n, stream);
}

void fp8_gemv_one_row(const __nv_bfloat16* x, const fp8* w8, const float* w_scale, int64_t out,
                      int64_t in, __nv_bfloat16* y, bool silu, int split, cudaStream_t stream) {
  const Args a{x, in, w8, w_scale, out, in, y, nullptr, out, nullptr};
  if (split != 1 && split != 2 && split != 4)
    fail_cuda("fp8_gemv", "split 1, 2 or 4", __FILE__, __LINE__);
  if (silu) {
    if (split == 1) return launch<1, 1, true>(a, stream);
    if (split == 2) return launch<1, 2, true>(a, stream);
    return launch<1, 4, true>(a, stream);
  }
  if (split == 1) return launch<1, 1, false>(a, stream);
  if (split == 2) return launch<1, 2, false>(a, stream);
  launch<1, 4, false>(a, stream);
}

}  // namespace specstack::cuda

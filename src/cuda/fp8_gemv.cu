#include <cuda_fp16.h>

#include "cuda/cuda_check.h"
#include "cuda/fp8_gemv.h"
#include "cuda/gemv_reduce.cuh"
#include "cuda/pdl.h"

namespace specstack::cuda {

namespace {

// 4 warps per block as in gemv.cu (a 3584-row matrix fills the last wave).
constexpr int kWarpsPerBlock = 4;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

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

// 16 bf16 of x (a 16-byte aligned address) to f32: converted once per
// vector and used for every weight row the warp holds (the gate and up rows,
// or two output rows), not once per weight row.
__device__ inline void bf16x16_to_float(const uint4* __restrict__ x, float (&f)[16]) {
  const uint4 a = __ldg(x), b = __ldg(x + 1);
  const auto* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
  const auto* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a2[i]);
    const float2 fb = __bfloat1622float2(b2[i]);
    f[2 * i] = fa.x;
    f[2 * i + 1] = fa.y;
    f[8 + 2 * i] = fb.x;
    f[8 + 2 * i + 1] = fb.y;
  }
}

// sum += w[0..16) · x[0..16) in the kernel's fixed order (the CPU twin in
// tests/cuda/fp8_test.cpp adds in the same order).
__device__ inline float dot16(const float (&w)[16], const float (&x)[16], float sum) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sum = fmaf(w[2 * i], x[2 * i], sum);
    sum = fmaf(w[2 * i + 1], x[2 * i + 1], sum);
    sum = fmaf(w[8 + 2 * i], x[8 + 2 * i], sum);
    sum = fmaf(w[8 + 2 * i + 1], x[8 + 2 * i + 1], sum);
  }
  return sum;
}

// kRows dot products of x's rows with each of kWRows weight rows (16-byte
// vectors of 16 weights), this warp's share of kSplit, warp-reduced into
// sum[][] (every lane). The kWRows rows' loads go out in one round and each x
// vector is converted once for all of them. Each lane adds its vectors in
// ascending order, one dot16 each, so a row's sum does not depend on kWRows.
template <int kRows, int kSplit, int kWRows>
__device__ inline void row_dots(const __nv_bfloat16* __restrict__ x, int64_t ldx,
                                const uint4* const (&w_rows)[kWRows], int64_t vectors, int part,
                                int lane, float (&sum)[kWRows][kRows]) {
  constexpr int64_t kStride = 32 * kSplit;
  int64_t v = int64_t(part) * 32 + lane;
  auto consume = [&](const uint4(&packed)[kWRows], int64_t at) {
    float w[kWRows][16];
#pragma unroll
    for (int j = 0; j < kWRows; ++j) fp8x16_to_float(packed[j], w[j]);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float xf[16];
      bf16x16_to_float(reinterpret_cast<const uint4*>(x + r * ldx) + 2 * at, xf);
#pragma unroll
      for (int j = 0; j < kWRows; ++j) sum[j][r] = dot16(w[j], xf, sum[j][r]);
    }
  };
  for (; v + kStride * (kUnroll - 1) < vectors; v += kStride * kUnroll) {
    uint4 wv[kUnroll][kWRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < kWRows; ++j) wv[u][j] = __ldcs(w_rows[j] + v + kStride * u);  // once
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) consume(wv[u], v + kStride * u);
  }
  for (; v < vectors; v += kStride) {
    uint4 wv[kWRows];
#pragma unroll
    for (int j = 0; j < kWRows; ++j) wv[j] = __ldcs(w_rows[j] + v);
    consume(wv, v);
  }
#pragma unroll
  for (int j = 0; j < kWRows; ++j) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        sum[j][r] += __shfl_xor_sync(0xffffffffu, sum[j][r], offset);
      }
    }
  }
}

// Before pdl_begin: L2 prefetch of the first unrolled iteration's weight
// vectors (as gemv.cu's prefetch_first; cuda/pdl.h says why it is safe).
template <int kSplit>
__device__ inline void prefetch_first(const uint4* w_row, int64_t vectors, int part, int lane) {
  constexpr int64_t kStride = 32 * kSplit;
  const int64_t v0 = int64_t(part) * 32 + lane;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (v0 + kStride * u < vectors) prefetch_l2(w_row + v0 + kStride * u);
  }
}

// kWarpsPerBlock / kSplit warp groups per block, each computing kOutRows
// consecutive output rows (silu: kOutRows = 1, the weight rows r and
// width + r, `out` = width). kOutRows = 2 halves the blocks of a one-row
// GEMV and gives every warp twice the bytes per x conversion and per round.
template <int kRows, int kSplit, bool kSilu, int kOutRows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    fp8_gemv_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, const fp8* __restrict__ w8,
                    const float* __restrict__ w_scale, int64_t out, int64_t in,
                    __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32, int64_t ldy,
                    const float* __restrict__ bias) {
  static_assert(!kSilu || kOutRows == 1, "a SiLU warp group holds one gate/up pair");
  constexpr int kWRows = kSilu ? 2 : kOutRows;  // weight rows per warp group
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row = (int64_t(blockIdx.x) * (kWarpsPerBlock / kSplit) + warp / kSplit) * kOutRows;
  const bool valid = row < out;  // no early return: the block reduction syncs
  const uint4* w_rows[kWRows];
#pragma unroll
  for (int j = 0; j < kWRows; ++j) {
    // silu: gate row, up row; else rows row.. (a row past `out` re-reads the
    // first one and is not stored).
    const int64_t w_row = kSilu ? j * out + row : (row + j < out ? row + j : row);
    w_rows[j] = reinterpret_cast<const uint4*>(w8 + w_row * in);
  }
  if (valid) {  // the gate row only, as gemv.cu
#pragma unroll
    for (int j = 0; j < (kSilu ? 1 : kWRows); ++j) {
      prefetch_first<kSplit>(w_rows[j], in / 16, warp % kSplit, lane);
    }
  }
  pdl_begin();
  constexpr int kValues = kWRows * kRows;
  float sum[kValues] = {};
  if (valid) {
    float dots[kWRows][kRows] = {};
    if constexpr (kSilu && kRows > 1) {
      // Several x rows: the gate and up rows one after the other (both at
      // once holds 2 x kRows sums and twice the weights, and spilled at 2 rows).
      for (int j = 0; j < kWRows; ++j) {
        const uint4* const one_row[1] = {w_rows[j]};
        float one_dots[1][kRows] = {};
        row_dots<kRows, kSplit, 1>(x, ldx, one_row, in / 16, warp % kSplit, lane, one_dots);
#pragma unroll
        for (int r = 0; r < kRows; ++r) dots[j][r] = one_dots[0][r];
      }
    } else {
      row_dots<kRows, kSplit, kWRows>(x, ldx, w_rows, in / 16, warp % kSplit, lane, dots);
    }
#pragma unroll
    for (int j = 0; j < kWRows; ++j) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) sum[j * kRows + r] = dots[j][r];
    }
  }
  reduce_parts<kWarpsPerBlock, kSplit>(sum, warp, lane);
  if (!valid || lane != 0 || warp % kSplit != 0) return;
  if constexpr (kSilu) {
    const float scale = w_scale[row], up_scale = w_scale[out + row];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float g = sum[r] * scale;
      y[r * ldy + row] = __float2bfloat16(g / (1.0f + expf(-g)) * (sum[kRows + r] * up_scale));
    }
  } else {
#pragma unroll
    for (int j = 0; j < kOutRows; ++j) {
      const int64_t o = row + j;
      if (o >= out) break;
      const float scale = w_scale[o];
      const float b = bias != nullptr ? bias[o] : 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float value = sum[j * kRows + r] * scale + b;
        if (y_f32 != nullptr) {
          y_f32[r * ldy + o] = value;
        } else {
          y[r * ldy + o] = __float2bfloat16(value);
        }
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

template <int kRows, int kSplit, bool kSilu, int kOutRows = 1>
void launch(const Args& a, cudaStream_t stream) {
  constexpr int kRowsPerBlock = kWarpsPerBlock / kSplit * kOutRows;
  const auto blocks = static_cast<unsigned>((a.out + kRowsPerBlock - 1) / kRowsPerBlock);
  launch_pdl(fp8_gemv_kernel<kRows, kSplit, kSilu, kOutRows>, blocks, kWarpsPerBlock * 32, 0,
             stream, true, a.x, a.ldx, a.w8, a.w_scale, a.out, a.in, a.y, a.y_f32, a.ldy, a.bias);
}

// One input row: warps per output row by the output count, as gemv.cu's
// default_split (short matrices spread each row's loads over more warps);
// the short ones' warp groups take two output rows each (kOutRows), so a
// block streams as many bytes as gemv.cu's bf16 one.
template <bool kSilu>
void launch_one_row(const Args& a, cudaStream_t stream) {
  if (a.out > 8192) return launch<1, 1, kSilu>(a, stream);
  if constexpr (kSilu) {
    return launch<1, 2, kSilu>(a, stream);
  } else {
    return launch<1, 4, kSilu, 2>(a, stream);
  }
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

template <int kSplit>
void launch_split(const Args& a, bool silu, int out_rows, cudaStream_t stream) {
  if (silu) return launch<1, kSplit, true>(a, stream);
  if (out_rows == 2) return launch<1, kSplit, false, 2>(a, stream);
  launch<1, kSplit, false>(a, stream);
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
                      int64_t in, __nv_bfloat16* y, bool silu, int split, int out_rows,
                      cudaStream_t stream) {
  const Args a{x, in, w8, w_scale, out, in, y, nullptr, out, nullptr};
  if (split != 1 && split != 2 && split != 4)
    fail_cuda("fp8_gemv", "split 1, 2 or 4", __FILE__, __LINE__);
  if (out_rows != 1 && (out_rows != 2 || silu))
    fail_cuda("fp8_gemv", "out_rows 1, or 2 without silu", __FILE__, __LINE__);
  if (split == 1) return launch_split<1>(a, silu, out_rows, stream);
  if (split == 2) return launch_split<2>(a, silu, out_rows, stream);
  launch_split<4>(a, silu, out_rows, stream);
}

}  // namespace specstack::cuda

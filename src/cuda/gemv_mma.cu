#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/gemv_mma.h"
#include "cuda/pdl.h"

namespace specstack::cuda {

namespace {

constexpr int kTileRows = 16;  // mma M: output rows per block

__device__ inline void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc (this lane's C fragment) += W[row0, +16) · Xᵀ over this warp's chunks.
//
// Lane (g = lane / 4, t = lane % 4) loads the 8 elements at k = 32c + 8t.. of
// weight rows row0 + g and row0 + g + 8 and of input row g. The dot product
// does not care which k sits where in an mma, so those 8 elements go in as
// they are: elements 0-3 to the first m16n8k16 (fragment k = 2t, 2t+1, 2t+8,
// 2t+9) and 4-7 to the second, and A and B agree because both use lane t's
// own elements. No shuffles, no shared memory, every load 16 bytes.
template <int kWarps, int kUnroll>
__device__ inline void tile_dot(const __nv_bfloat16* __restrict__ w, int64_t rows, int64_t row0,
                                const uint4* __restrict__ x_row, int64_t vectors, int warp,
                                int lane, float (&acc)[4]) {
  const int g = lane / 4, t = lane % 4;
  const int64_t chunks = (vectors + 3) / 4;
  const bool valid_a = row0 + g < rows, valid_b = row0 + g + 8 < rows;
  const auto* wa_row = reinterpret_cast<const uint4*>(w + (row0 + g) * vectors * 8);
  const auto* wb_row = reinterpret_cast<const uint4*>(w + (row0 + g + 8) * vectors * 8);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t c0 = warp; c0 < chunks; c0 += int64_t(kWarps) * kUnroll) {
    uint4 wa[kUnroll], wb[kUnroll], xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = (c0 + int64_t(u) * kWarps) * 4 + t;
      const bool ok = v < vectors;                        // also false past the last chunk
      wa[u] = ok && valid_a ? __ldcs(wa_row + v) : zero;  // weights: streamed once
      wb[u] = ok && valid_b ? __ldcs(wb_row + v) : zero;
      xv[u] = ok && x_row != nullptr ? __ldg(x_row + v) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      mma_bf16(acc, wa[u].x, wb[u].x, wa[u].y, wb[u].y, xv[u].x, xv[u].y);
      mma_bf16(acc, wa[u].z, wb[u].z, wa[u].w, wb[u].w, xv[u].z, xv[u].w);
    }
  }
}

// One block per 16 output rows; its kWarps warps split k and their partial C
// fragments are summed in a fixed order (deterministic).
template <bool kSilu, int kWarps, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_mma_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int n,
                    const __nv_bfloat16* __restrict__ w, int64_t out, int64_t in,
                    __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32, int64_t ldy,
                    const float* __restrict__ bias) {
  constexpr int kTiles = kSilu ? 2 : 1;  // gate and up
  __shared__ float partial[kTiles][kWarps][32][4];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = int64_t(blockIdx.x) * kTileRows;
  const int64_t vectors = in / 8;
  const int g = lane / 4;
  // Before pdl_begin: L2 prefetch of the first tile's first unrolled loads
  // (tile_dot's first iteration), overlapping the previous kernel's tail
  // (cuda/pdl.h says why this is safe).
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t v = (int64_t(warp) + int64_t(u) * kWarps) * 4 + lane % 4;
    if (v >= vectors) break;
    if (row0 + g < out) prefetch_l2(w + (row0 + g) * in + v * 8);
    if (row0 + g + 8 < out) prefetch_l2(w + (row0 + g + 8) * in + v * 8);
  }
  // The epilogue thread's bias (a weight) before the wait as well (cuda/pdl.h).
  float b = 0.0f;
  if (!kSilu && bias != nullptr && threadIdx.x < 128) {
    const int64_t r = row0 + (threadIdx.x % 32) / 4 + (threadIdx.x / 32 >= 2 ? 8 : 0);
    if (r < out) b = bias[r];
  }
  pdl_begin();
  const auto* x_row = g < n ? reinterpret_cast<const uint4*>(x + g * ldx) : nullptr;
  const int64_t w_rows = kSilu ? 2 * out : out;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Up rows sit `out` rows below their gate rows.
    tile_dot<kWarps, kUnroll>(w, w_rows, row0 + tile * out, x_row, vectors, warp, lane, acc);
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[tile][warp][lane][j] = acc[j];
  }
  __syncthreads();

  // Thread i < 128 owns C element (lane i % 32, register i / 32) of the
  // fragment: row lane / 4 (+ 8 for registers 2, 3), column 2 (lane % 4) +
  // register % 2.
  if (threadIdx.x >= 128) return;
  const int l = threadIdx.x % 32, j = threadIdx.x / 32;
  const int64_t row = row0 + l / 4 + (j >= 2 ? 8 : 0);
  const int col = 2 * (l % 4) + (j & 1);
  if (row >= out || col >= n) return;
  float sum[kTiles];
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    sum[tile] = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum[tile] += partial[tile][wi][l][j];
  }
  if constexpr (kSilu) {
    const float gate = sum[0];
    y[col * ldy + row] = __float2bfloat16(gate / (1.0f + expf(-gate)) * sum[1]);
  } else {
    const float value = sum[0] + b;
    if (y_f32 != nullptr) {
      y_f32[col * ldy + row] = value;
    } else {
      y[col * ldy + row] = __float2bfloat16(value);
    }
  }
}

template <int kWarps, int kUnroll>
void launch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int n, int64_t out,
            int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + kTileRows - 1) / kTileRows);
  if (silu) {
    launch_pdl(gemv_mma_kernel<true, kWarps, kUnroll>, blocks, kWarps * 32, 0, stream, true, x, ldx,
               n, w, out, in, y, static_cast<float*>(nullptr), ldy,
               static_cast<const float*>(nullptr));
  } else {
    launch_pdl(gemv_mma_kernel<false, kWarps, kUnroll>, blocks, kWarps * 32, 0, stream, true, x,
               ldx, n, w, out, in, y, y_f32, ldy, bias);
  }
}

}  // namespace

void gemv_mma(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
              cudaStream_t stream, GemvMmaShape shape) {
  if (n < 2 || n > 8) fail_cuda("gemv_mma", "n out of range", __FILE__, __LINE__);
  const int rows = static_cast<int>(n);
  if (shape.warps == 0) {
    // Few 16-row blocks (o, down: out <= 4096) need 16 warps each to keep
    // enough loads in flight; wider matrices fill the GPU with 8.
    shape = silu || out > 4096 ? GemvMmaShape{8, 2} : GemvMmaShape{16, 2};
  }
  const int key = shape.warps * 100 + shape.unroll;
  switch (key) {
#define SS_GEMV_MMA_CASE(W, U) \
  case W * 100 + U:            \
    return launch<W, U>(x, ldx, w, rows, out, in, y, y_f32, ldy, bias, silu, stream);
    SS_GEMV_MMA_CASE(4, 2)
    SS_GEMV_MMA_CASE(4, 4)
    SS_GEMV_MMA_CASE(4, 8)
    SS_GEMV_MMA_CASE(8, 2)
    SS_GEMV_MMA_CASE(8, 4)
    SS_GEMV_MMA_CASE(8, 8)
    SS_GEMV_MMA_CASE(16, 1)
    SS_GEMV_MMA_CASE(16, 2)
    SS_GEMV_MMA_CASE(16, 4)
#undef SS_GEMV_MMA_CASE
    default:
      break;
  }
  fail_cuda("gemv_mma", "unsupported launch shape", __FILE__, __LINE__);
}

}  // namespace specstack::cuda

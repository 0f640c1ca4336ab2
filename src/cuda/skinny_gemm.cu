#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/skinny_gemm.h"

namespace specstack::cuda {

namespace {

constexpr int kWarps = 8;      // split k inside the block
constexpr int kTileRows = 16;  // weight rows per block (mma M)
constexpr int kMaxNTiles = kSkinnyMaxRows / 8;

__device__ inline void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[j] (this lane's C fragments) += W[row0, +16) · X[8j, +8)ᵀ over this
// warp's 32-wide k chunks. Lane (g, t) loads the 8 elements at k = 32c + 8t
// of weight rows row0 + g, row0 + g + 8 and of input rows 8j + g; as in
// gemv_mma, A and B agree on where each k sits inside the mma, which the dot
// product does not notice. The weights stream from DRAM once; the input rows
// come from L2 (every block reads them: 16-row tiles keep enough blocks).
template <int kNTiles>
__device__ inline void tile_dot(const __nv_bfloat16* __restrict__ w, int64_t rows, int64_t row0,
                                const __nv_bfloat16* __restrict__ x, int64_t ldx, int n,
                                int64_t vectors, int warp, int lane, float (&acc)[kNTiles][4]) {
  const int g = lane / 4, t = lane % 4;
  const int64_t chunks = vectors / 4;  // in % 32 == 0
  const bool valid_a = row0 + g < rows, valid_b = row0 + g + 8 < rows;
  const auto* wa_row = reinterpret_cast<const uint4*>(w + (row0 + g) * vectors * 8);
  const auto* wb_row = reinterpret_cast<const uint4*>(w + (row0 + g + 8) * vectors * 8);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t c = warp; c < chunks; c += kWarps) {
    const int64_t v = c * 4 + t;
    const uint4 wa = valid_a ? __ldcs(wa_row + v) : zero;  // weights: streamed once
    const uint4 wb = valid_b ? __ldcs(wb_row + v) : zero;
    uint4 xv[kNTiles];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const int r = 8 * j + g;
      xv[j] = r < n ? __ldg(reinterpret_cast<const uint4*>(x + r * ldx) + v) : zero;
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      mma_bf16(acc[j], wa.x, wb.x, wa.y, wb.y, xv[j].x, xv[j].y);
      mma_bf16(acc[j], wa.z, wb.z, wa.w, wb.w, xv[j].z, xv[j].w);
    }
  }
}

// The block's 16 x (8 kNTiles) result, summed over its warps in warp order
// (deterministic), into out[16][8 kNTiles] f32 (shared). partial is
// [kWarps][kNTiles * 4][32] f32 (lane fastest: conflict-free).
template <int kNTiles>
__device__ inline void reduce_warps(const float (&acc)[kNTiles][4], float* partial, float* out,
                                    int warp, int lane) {
#pragma unroll
  for (int q = 0; q < kNTiles * 4; ++q)
    partial[(warp * kNTiles * 4 + q) * 32 + lane] = acc[q / 4][q % 4];
  __syncthreads();
  for (int e = threadIdx.x; e < kNTiles * 4 * 32; e += kWarps * 32) {
    const int q = e / 32, l = e % 32;
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[(wi * kNTiles * 4 + q) * 32 + l];
    const int j = q / 4, c = q % 4;
    const int row = l / 4 + (c >= 2 ? 8 : 0), col = 8 * j + 2 * (l % 4) + (c & 1);
    out[row * (8 * kNTiles) + col] = sum;
  }
  __syncthreads();
}

// One block per 16 output rows (with SiLU: 16 gate rows, then their up rows).
template <bool kSilu, int kNTiles>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int n,
                       const __nv_bfloat16* __restrict__ w, int64_t out, int64_t in,
                       __nv_bfloat16* __restrict__ y, float* __restrict__ y_f32, int64_t ldy,
                       const float* __restrict__ bias) {
  pdl_begin();
  extern __shared__ __align__(16) float smem[];
  float* partial = smem;                                // [kWarps][kNTiles * 4][32]
  float* result = partial + kWarps * kNTiles * 4 * 32;  // [2][16][8 kNTiles]
  constexpr int kCols = 8 * kNTiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = int64_t(blockIdx.x) * kTileRows;
  const int64_t vectors = in / 8;
  constexpr int kTiles = kSilu ? 2 : 1;  // gate and up
  const int64_t w_rows = kSilu ? 2 * out : out;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
    float acc[kNTiles][4];
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    // Up rows sit `out` rows below their gate rows.
    tile_dot<kNTiles>(w, w_rows, row0 + tile * out, x, ldx, n, vectors, warp, lane, acc);
    reduce_warps<kNTiles>(acc, partial, result + tile * kTileRows * kCols, warp, lane);
  }
  for (int e = threadIdx.x; e < kTileRows * n; e += kWarps * 32) {
    const int r = e / kTileRows, i = e % kTileRows;  // input row, output column in the tile
    const int64_t col = row0 + i;
    if (col >= out) continue;
    const float v = result[i * kCols + r];
    if constexpr (kSilu) {
      const float up = result[kTileRows * kCols + i * kCols + r];
      y[r * ldy + col] = __float2bfloat16(v / (1.0f + expf(-v)) * up);
    } else {
      const float value = v + (bias != nullptr ? bias[col] : 0.0f);
      if (y_f32 != nullptr) {
        y_f32[r * ldy + col] = value;
      } else {
        y[r * ldy + col] = __float2bfloat16(value);
      }
    }
  }
}

template <int kNTiles>
void launch(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int n, int64_t out,
            int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy, const float* bias, bool silu,
            cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((out + kTileRows - 1) / kTileRows);
  const size_t smem =
      (size_t(kWarps) * kNTiles * 4 * 32 + size_t(2) * kTileRows * 8 * kNTiles) * sizeof(float);
  // Over 48 KB at 128 rows: opting in is per kernel; setting it again is cheap.
  if (silu) {
    SS_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<true, kNTiles>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    launch_pdl(skinny_gemm_kernel<true, kNTiles>, blocks, kWarps * 32, smem, stream, true, x, ldx,
               n, w, out, in, y, static_cast<float*>(nullptr), ldy,
               static_cast<const float*>(nullptr));
  } else {
    SS_CUDA_CHECK(cudaFuncSetAttribute(skinny_gemm_kernel<false, kNTiles>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    launch_pdl(skinny_gemm_kernel<false, kNTiles>, blocks, kWarps * 32, smem, stream, true, x, ldx,
               n, w, out, in, y, y_f32, ldy, bias);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool skinny_gemm_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                           int64_t in, bool silu) {
  return n >= kSkinnyMinRows && n <= kSkinnyMaxRows && in > 0 && in % 32 == 0 && ldx % 8 == 0 &&
         aligned16(x) && aligned16(w) && (silu ? 2 : 1) * out * in <= kSkinnyMaxWeightElements;
}

void skinny_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
                 const float* bias, bool silu, cudaStream_t stream) {
  if (!skinny_gemm_supported(x, ldx, w, n, out, in, silu)) {
    fail_cuda("skinny_gemm", "unsupported operands", __FILE__, __LINE__);
  }
  const int rows = static_cast<int>(n);
  // Whole 8-row tiles in 4 sizes: the fragments and loads stay in registers.
  if (n <= 32) return launch<4>(x, ldx, w, rows, out, in, y, y_f32, ldy, bias, silu, stream);
  if (n <= 64) return launch<8>(x, ldx, w, rows, out, in, y, y_f32, ldy, bias, silu, stream);
  if (n <= 96) return launch<12>(x, ldx, w, rows, out, in, y, y_f32, ldy, bias, silu, stream);
  return launch<16>(x, ldx, w, rows, out, in, y, y_f32, ldy, bias, silu, stream);
}

}  // namespace specstack::cuda

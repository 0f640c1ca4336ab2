#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/skinny_gemm.h"

namespace specstack::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kTileRows = 16 * kWarps;  // weight rows per block
constexpr int kChunk = 64;              // k per shared-memory stage
// Row pitch of a stage in elements: 192 bytes = 48 words, so the two input
// rows a quarter-warp reads (lanes g = 0, 1) land 16 words apart and the
// 16-byte loads are conflict-free.
constexpr int kPitch = kChunk + 32;
constexpr int kTilesN = kSkinnyMaxRows / 8;           // mma n8 tiles over the input rows
constexpr int kStageElems = kSkinnyMaxRows * kPitch;  // one stage [128 rows][kPitch]
constexpr int kCPitch = kSkinnyMaxRows + 1;           // epilogue tile [64][129] f32
constexpr int kSmemBytes = 2 * kStageElems * 2;       // 48 KB: two bf16 stages
static_assert(kTileRows * kCPitch * 4 + 16 <= kSmemBytes, "epilogue tile must fit the stages");
// Blocks a launch aims for (two per SM of an H100's 132); a constant so the
// k slicing, and with it every result, is the same on every GPU.
constexpr int64_t kTargetBlocks = 264;

__device__ inline void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Input rows [0, n) of k chunk `c` into a stage: 8 16-byte vectors a row.
__device__ inline void load_x(const __nv_bfloat16* __restrict__ x, int64_t ldx, int n, int64_t c,
                              __nv_bfloat16* stage) {
  for (int i = threadIdx.x; i < n * (kChunk / 8); i += kWarps * 32) {
    const int row = i / (kChunk / 8), v = i % (kChunk / 8);
    cp_async_16(stage + row * kPitch + v * 8, x + row * ldx + c * kChunk + v * 8);
  }
}

// This lane's weights for k chunk `c`: 8 elements at k = 32s + 8t of rows g
// and g + 8 of the warp's 16, for the two 32-wide halves s. As in gemv_mma
// the dot product does not care where a k sits inside an mma, so A and B
// just have to agree: both use lane t's own 8 elements (B reads them from
// the stage at the same k).
struct WeightRegs {
  uint4 a[2], b[2];
};
__device__ inline void load_w(const __nv_bfloat16* __restrict__ w, int64_t in, int64_t row0,
                              bool valid_a, bool valid_b, int g, int t, int64_t c, WeightRegs& r) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const int64_t k = c * kChunk + 32 * s + 8 * t;
    r.a[s] = valid_a ? __ldcs(reinterpret_cast<const uint4*>(w + (row0 + g) * in + k)) : zero;
    r.b[s] = valid_b ? __ldcs(reinterpret_cast<const uint4*>(w + (row0 + g + 8) * in + k)) : zero;
  }
}

// grid (tiles, splits), block kWarps x 32. Tile bx: weight rows [64 bx, +64),
// or with SiLU gate rows [32 bx, +32) (warps 0, 1) and their up rows
// [out + 32 bx, +32) (warps 2, 3), so the epilogue has both halves.
template <bool kSilu>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int n,
                       const __nv_bfloat16* __restrict__ w, int64_t out, int64_t in,
                       int64_t chunks_per_split, __nv_bfloat16* __restrict__ y,
                       float* __restrict__ y_f32, int64_t ldy, const float* __restrict__ bias,
                       float* __restrict__ partials, int* __restrict__ counters) {
  pdl_begin();
  __shared__ __align__(16) unsigned char smem[kSmemBytes];
  auto* stages = reinterpret_cast<__nv_bfloat16*>(smem);  // [2][128][kPitch]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t tile = blockIdx.x;
  const int split = static_cast<int>(blockIdx.y), splits = static_cast<int>(gridDim.y);

  int64_t row0, row_end;  // this warp's 16 weight rows and the bound they must stay under
  if constexpr (kSilu) {
    const int64_t base = (warp < 2 ? 0 : out) + 32 * tile + 16 * (warp % 2);
    row0 = base;
    row_end = warp < 2 ? out : 2 * out;
  } else {
    row0 = kTileRows * tile + 16 * warp;
    row_end = out;
  }
  const bool valid_a = row0 + g < row_end, valid_b = row0 + g + 8 < row_end;

  const int64_t chunks = in / kChunk;
  const int64_t c_begin = split * chunks_per_split;
  const int64_t c_end = std::min(chunks, c_begin + chunks_per_split);
  const int n_tiles = (n + 7) / 8;

  float acc[kTilesN][4];
#pragma unroll
  for (int j = 0; j < kTilesN; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  WeightRegs cur, next{};
  load_x(x, ldx, n, c_begin, stages);
  cp_async_commit();
  load_w(w, in, row0, valid_a, valid_b, g, t, c_begin, cur);
  for (int64_t c = c_begin; c < c_end; ++c) {
    __nv_bfloat16* stage = stages + ((c - c_begin) & 1) * kStageElems;
    if (c + 1 < c_end) {  // next chunk's loads in flight while this one computes
      load_x(x, ldx, n, c + 1, stages + ((c + 1 - c_begin) & 1) * kStageElems);
      cp_async_commit();
      load_w(w, in, row0, valid_a, valid_b, g, t, c + 1, next);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
#pragma unroll
    for (int s = 0; s < 2; ++s) {
#pragma unroll
      for (int j = 0; j < kTilesN; ++j) {
        if (j < n_tiles) {  // warp-uniform; rows of the last tile past n are never stored
          const uint4 xv =
              *reinterpret_cast<const uint4*>(stage + (8 * j + g) * kPitch + 32 * s + 8 * t);
          mma_bf16(acc[j], cur.a[s].x, cur.b[s].x, cur.a[s].y, cur.b[s].y, xv.x, xv.y);
          mma_bf16(acc[j], cur.a[s].z, cur.b[s].z, cur.a[s].w, cur.b[s].w, xv.z, xv.w);
        }
      }
    }
    __syncthreads();  // the stage is refilled two chunks on
    cur = next;
  }

  // C fragment -> ctile[local weight row][input row] (the stages are done).
  auto* ctile = reinterpret_cast<float*>(smem);
  const int lr = 16 * warp + g;
#pragma unroll
  for (int j = 0; j < kTilesN; ++j) {
    if (j < n_tiles) {
      const int r = 8 * j + 2 * t;
      ctile[lr * kCPitch + r] = acc[j][0];
      ctile[lr * kCPitch + r + 1] = acc[j][1];
      ctile[(lr + 8) * kCPitch + r] = acc[j][2];
      ctile[(lr + 8) * kCPitch + r + 1] = acc[j][3];
    }
  }
  __syncthreads();

  if (splits > 1) {
    // This slice's partial [64][128] f32 (rows < n written), then the last
    // block of the tile sums all slices in slice order.
    const int64_t region = int64_t(kTileRows) * kSkinnyMaxRows;
    float* mine = partials + (tile * splits + split) * region;
    for (int i = threadIdx.x; i < kTileRows * n; i += kWarps * 32) {
      const int c = i / n, r = i % n;
      mine[c * kSkinnyMaxRows + r] = ctile[c * kCPitch + r];
    }
    __threadfence();
    __syncthreads();
    auto* last = reinterpret_cast<int*>(smem + kSmemBytes - 16);
    if (threadIdx.x == 0) *last = atomicAdd(counters + tile, 1) == splits - 1;
    __syncthreads();
    if (*last == 0) return;
    __threadfence();
    const float* all = partials + tile * splits * region;
    for (int i = threadIdx.x; i < kTileRows * n; i += kWarps * 32) {
      const int c = i / n, r = i % n;
      float sum = 0.0f;
      for (int s = 0; s < splits; ++s) sum += __ldcg(all + s * region + c * kSkinnyMaxRows + r);
      ctile[c * kCPitch + r] = sum;
    }
    if (threadIdx.x == 0) counters[tile] = 0;  // ready for the next launch
    __syncthreads();
  }

  if constexpr (kSilu) {
    for (int i = threadIdx.x; i < 32 * n; i += kWarps * 32) {
      const int r = i / 32, c = i % 32;
      const int64_t col = 32 * tile + c;
      if (col >= out) continue;
      const float gate = ctile[c * kCPitch + r], up = ctile[(32 + c) * kCPitch + r];
      y[r * ldy + col] = __float2bfloat16(gate / (1.0f + expf(-gate)) * up);
    }
  } else {
    for (int i = threadIdx.x; i < kTileRows * n; i += kWarps * 32) {
      const int r = i / kTileRows, c = i % kTileRows;
      const int64_t col = kTileRows * tile + c;
      if (col >= out) continue;
      const float value = ctile[c * kCPitch + r] + (bias != nullptr ? bias[col] : 0.0f);
      if (y_f32 != nullptr) {
        y_f32[r * ldy + col] = value;
      } else {
        y[r * ldy + col] = __float2bfloat16(value);
      }
    }
  }
}

int64_t tiles_of(int64_t out, bool silu) {
  return silu ? (out + 31) / 32 : (out + kTileRows - 1) / kTileRows;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

bool skinny_gemm_supported(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                           int64_t in, bool silu) {
  return n >= kSkinnyMinRows && n <= kSkinnyMaxRows && in > 0 && in % kChunk == 0 && ldx % 8 == 0 &&
         aligned16(x) && aligned16(w) && (silu ? 2 : 1) * out * in <= kSkinnyMaxWeightElements &&
         tiles_of(out, silu) <= kSkinnyMaxTiles;
}

int64_t skinny_gemm_splits(int64_t out, int64_t in, bool silu) {
  const int64_t tiles = tiles_of(out, silu), chunks = in / kChunk;
  const int64_t want = std::clamp<int64_t>((kTargetBlocks + tiles - 1) / tiles, 1, chunks);
  const int64_t per_split = (chunks + want - 1) / want;
  return (chunks + per_split - 1) / per_split;  // no empty slice
}

size_t skinny_gemm_partial_floats(int64_t out, int64_t in, bool silu) {
  const int64_t splits = skinny_gemm_splits(out, in, silu);
  return splits > 1 ? size_t(tiles_of(out, silu) * splits) * kTileRows * kSkinnyMaxRows : 0;
}

void skinny_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t out, int64_t in, __nv_bfloat16* y, float* y_f32, int64_t ldy,
                 const float* bias, bool silu, const SkinnyGemmScratch& scratch,
                 cudaStream_t stream, int64_t splits) {
  if (!skinny_gemm_supported(x, ldx, w, n, out, in, silu)) {
    fail_cuda("skinny_gemm", "unsupported operands", __FILE__, __LINE__);
  }
  const int64_t chunks = in / kChunk;
  if (splits == 0) splits = skinny_gemm_splits(out, in, silu);
  splits = std::clamp<int64_t>(splits, 1, chunks);
  const int64_t per_split = (chunks + splits - 1) / splits;
  splits = (chunks + per_split - 1) / per_split;
  const int64_t tiles = tiles_of(out, silu);
  if (splits > 1 &&
      (scratch.counters == nullptr ||
       size_t(tiles * splits) * kTileRows * kSkinnyMaxRows > scratch.partial_floats)) {
    fail_cuda("skinny_gemm", "scratch too small for the split-k partials", __FILE__, __LINE__);
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
  const int rows = static_cast<int>(n);
  if (silu) {
    launch_pdl(skinny_gemm_kernel<true>, grid, kWarps * 32, 0, stream, true, x, ldx, rows, w, out,
               in, per_split, y, static_cast<float*>(nullptr), ldy,
               static_cast<const float*>(nullptr), scratch.partials, scratch.counters);
  } else {
    launch_pdl(skinny_gemm_kernel<false>, grid, kWarps * 32, 0, stream, true, x, ldx, rows, w, out,
               in, per_split, y, y_f32, ldy, bias, scratch.partials, scratch.counters);
  }
}

}  // namespace specstack::cuda

// SwiGLU gate/up GEMM for Hopper (swiglu_gemm.h). Shapes and roles:
//   CTA: 384 threads = warpgroup 0 (one thread issues the TMA loads) and
//   consumer warpgroups 1, 2 (rows 0-63 / 64-127 of the 128-row tile).
//   Stage s: A tile [128 rows][64 k] bf16 (16 KB) then B tile [256 rows][64 k]
//   (32 KB: 128 gate rows, then the 128 up rows of the same columns), each row
//   128 bytes in the TMA / wgmma 128-byte swizzle (cuda/wgmma.cuh).
//   Accumulators: a consumer thread's d[128] is its part of a 64 x 256 f32 tile
//   (wgmma layout: d[4 j + e] at row 16 w + g, column 8 j + 2 t + e; d[4 j + 2 + e]
//   at row + 8), so gate column c (j < 16) and its up column (j + 16) are in the
//   same thread: the SwiGLU needs no exchange.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/sm90a.h"
#include "cuda/swiglu_gemm.h"
#include "cuda/swiglu_gemm_common.cuh"
#include "cuda/wgmma.cuh"

namespace specstack::cuda {
namespace {

constexpr int kBlockM = 128;  // rows of x (and act) per tile
constexpr int kBlockN = 128;  // act columns per tile (256 weight rows)
constexpr int kBlockK = 64;   // k per stage: one 128-byte swizzle row
constexpr int kStages = 4;
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
using Pipe = swiglu_common::Pipeline<kStages, kBlockM, kBlockN, kBlockK>;  // 48 KB a stage
constexpr uint32_t kSmemBytes = Pipe::kSmemBytes;

struct Params {
  __nv_bfloat16* act;  // [m, width]
  int32_t m, width, k;
  int32_t m_tiles, n_tiles;
};

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace wg;
using namespace swiglu_common;

// d (64x256 f32) = or += A (64x16, smem, K-major) * B (16x256, smem, K-major).
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                              int accumulate) {
#define SS_D8(i)                                                                              \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define SS_D32(i) SS_D8(i), SS_D8(i + 8), SS_D8(i + 16), SS_D8(i + 24)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : SS_D32(0), SS_D32(32), SS_D32(64), SS_D32(96)
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
#undef SS_D32
#undef SS_D8
}

#endif

__global__ void __launch_bounds__(kThreads, 1)
    swiglu_gemm_kernel(const __grid_constant__ CUtensorMap map_x,
                       const __grid_constant__ CUtensorMap map_w, const Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];
  const Pipe pipe(smem_raw, bars);
  pipe.init();
  const int tid = threadIdx.x;
  const int32_t k_blocks = p.k / kBlockK;
  const int32_t total = p.m_tiles * p.n_tiles;
  if (tid < 128) {  // producer warpgroup: one thread issues every load
    if (tid == 0) pipe.produce(&map_x, &map_w, p.m_tiles, p.n_tiles, k_blocks, p.width);
    return;
  }

  const int consumer = tid / 128 - 1;  // rows 64 consumer ..
  const int warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  float d[128];
  int s = 0;
  uint32_t phase = 0;
  for (int32_t t = blockIdx.x; t < total; t += gridDim.x) {
    int32_t mt, nt;
    tile_coords(t, p.m_tiles, p.n_tiles, mt, nt);
    int prev = 0;
    for (int32_t kb = 0; kb < k_blocks; ++kb) {
      mbar_wait(pipe.full(s), phase);
      const uint32_t a = pipe.a_tile(s) + consumer * 64 * 128;
      const uint32_t b = pipe.b_tile(s);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wgmma_m64n256(d, make_desc(a + kk * 32, 16, 1024), make_desc(b + kk * 32, 16, 1024),
                      (kb | kk) != 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's MMAs are done: its smem may be refilled
      if (kb > 0 && lane == 0) mbar_arrive(pipe.empty(prev));
      prev = s;
      if (++s == kStages) s = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    fence_regs(d);
    if (lane == 0) mbar_arrive(pipe.empty(prev));
    // Epilogue: g and u rounded to bf16, as the gate_up GEMM's bf16 output
    // holds them, then silu(g) * u in f32 (silu_mul's arithmetic, fast exp /
    // divide): the result differs from the cuBLAS + silu_mul path only where
    // the two summation orders round g or u differently, so a request's
    // tokens do not depend on whether its step crossed the row threshold.
    // One bf16 pair a store. The tensor cores idle while this runs.
    const int32_t row = mt * kBlockM + consumer * 64 + warp * 16 + g;
    const int32_t col0 = nt * kBlockN + 2 * t4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int32_t r = row + 8 * half;
      if (r >= p.m) continue;
      __nv_bfloat16* out = p.act + int64_t{r} * p.width + col0;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int i = 4 * j + 2 * half;  // gate columns 8 j + 2 t4 + {0, 1}; up: 16 blocks on
        const float o0 = swiglu(bf16_round(d[i]), bf16_round(d[i + 64]));
        const float o1 = swiglu(bf16_round(d[i + 1]), bf16_round(d[i + 65]));
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) = __floats2bfloat162_rn(o0, o1);
      }
    }
  }
#endif
}

}  // namespace

bool swiglu_gemm_supported(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                           int64_t width, int64_t in, const __nv_bfloat16* act) {
  return n > 0 && in > 0 && in % kBlockK == 0 && width > 0 && width % kBlockN == 0 && ldx >= in &&
         ldx % 8 == 0 && n <= INT32_MAX && 2 * width <= INT32_MAX && aligned16(x) && aligned16(w) &&
         aligned16(act) && device_runs_sm90a();
}

void swiglu_gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                 int64_t width, int64_t in, __nv_bfloat16* act, cudaStream_t stream) {
  SS_CHECK(swiglu_gemm_supported(x, ldx, w, n, width, in, act));
  // Every launch (a host call of ~1 us beside a kernel of >= 1024 rows): the
  // attribute is per device, and a process may drive several.
  SS_CUDA_CHECK(cudaFuncSetAttribute(swiglu_gemm_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  constexpr auto kBf16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const CUtensorMap map_x = swiglu_common::tensor_map(x, kBf16, 2, n, in, 2 * ldx, kBlockM);
  const CUtensorMap map_w = swiglu_common::tensor_map(w, kBf16, 2, 2 * width, in, 2 * in, kBlockN);
  Params p;
  p.act = act;
  p.m = static_cast<int32_t>(n);
  p.width = static_cast<int32_t>(width);
  p.k = static_cast<int32_t>(in);
  p.m_tiles = static_cast<int32_t>((n + kBlockM - 1) / kBlockM);
  p.n_tiles = static_cast<int32_t>(width / kBlockN);
  const int64_t tiles = int64_t{p.m_tiles} * p.n_tiles;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, swiglu_common::sm_count()));
  swiglu_gemm_kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_x, map_w, p);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

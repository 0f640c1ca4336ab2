// SwiGLU gate/up GEMM for Hopper on e4m3 operands (fp8_swiglu_gemm in
// swiglu_gemm.h; the bf16 kernel is swiglu_gemm.cu). Shapes and roles:
//   CTA: 384 threads = warpgroup 0 (one thread issues the TMA loads) and
//   consumer warpgroups 1, 2 (rows 0-63 / 64-127 of the 128-row tile).
//   Tile: 128 rows x 64 act columns; its weight tile is the 64 gate rows and
//   the 64 up rows of those columns (128 weight rows).
//   Stage s: A tile [128 rows][128 k] e4m3 (16 KB) then B tile [128 rows][128 k]
//   (16 KB: gate rows, then up rows), each row 128 bytes in the TMA / wgmma
//   128-byte swizzle (cuda/wgmma.cuh); a wgmma m64n128k32 takes 32 bytes of k.
//   Accumulators: the tensor cores' d[64] per stage (wgmma layout: d[4 j + e]
//   at row 16 w + g, column 8 j + 2 t + e; d[4 j + 2 + e] at row + 8), so gate
//   column c (j < 8) and its up column (j + 8) sit in the same thread.
// Precision: Hopper's FP8 MMAs keep a narrower sum than f32 (about 14 bits,
// DeepSeek-V3 §3.3.2), so each stage's 128-deep product is added into an f32
// accumulator of its own ("promotion", what cuBLASLt does without
// CUBLASLT_MATMUL_DESC_FAST_ACCUM, which this project leaves off). A consumer
// keeps two stages' products in flight and promotes the older while the newer
// runs (waiting for each stage before promoting ran at ~780 TFLOP/s on an
// H100, this at ~1000): with the f32 sum that is 3 x 64 accumulator registers
// a thread (setmaxnreg 232), which is why the tile is 64 act columns wide, not
// the bf16 kernel's 128 (n256 would need 3 x 128).
// Performance (H100, sessions 39 and 41): ~1000 TFLOP/s, below cuBLASLt's FP8
// GEMM (~1170 in the same MLP), so Gemm takes this kernel only with
// SPECSTACK_FP8_SWIGLU_GEMM=1. Not L2-bound: CTA pairs sharing the A tile by
// TMA multicast (a quarter less L2 traffic) ran no faster (DESIGN-NOTES).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

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

using fp8 = __nv_fp8_e4m3;

constexpr int kBlockM = 128;  // rows of x (and act) per tile
constexpr int kBlockN = 64;   // act columns per tile (128 weight rows)
constexpr int kBlockK = 128;  // k per stage: one 128-byte swizzle row of e4m3
constexpr int kStages = 6;
constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
// Registers after setmaxnreg: the producer's one thread needs few; a
// consumer holds two stages' products and the f32 sum (3 x 64).
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;
static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= 65536, "register file");
using Pipe = swiglu_common::Pipeline<kStages, kBlockM, kBlockN, kBlockK>;  // 32 KB a stage
constexpr uint32_t kSmemBytes = Pipe::kSmemBytes;

struct Params {
  __nv_bfloat16* act;    // [m, width]
  const float* x_scale;  // [m]
  const float* w_scale;  // [2 width]
  int32_t m, width, k;
  int32_t m_tiles, n_tiles;
};

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace wg;
using namespace swiglu_common;
#endif

__global__ void __launch_bounds__(kThreads, 1)
    fp8_swiglu_gemm_kernel(const __grid_constant__ CUtensorMap map_x,
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
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid == 0) pipe.produce(&map_x, &map_w, p.m_tiles, p.n_tiles, k_blocks, p.width);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));

  const int consumer = tid / 128 - 1;  // rows 64 consumer ..
  const int warp = (tid / 32) % 4, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  // Two stages' products in flight (the tensor cores' accumulators, used in
  // turn) and the tile's f32 sum of the stages' products.
  float d0[64], d1[64], acc[64];
  int s = 0, prev = 0;
  uint32_t phase = 0;
  // Stage s's product into d: four MMAs, one commit group.
  auto issue = [&](float(&d)[64]) {
    mbar_wait(pipe.full(s), phase);
    const uint32_t a = pipe.a_tile(s) + consumer * 64 * 128;
    const uint32_t b = pipe.b_tile(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      wgmma_m64n128_e4m3(d, make_desc(a + kk * 32, 16, 1024), make_desc(b + kk * 32, 16, 1024),
                         kk != 0);
    }
    wgmma_commit();
    prev = s;
    if (++s == kStages) s = 0, phase ^= 1;
  };
  // The stage before the one just issued is done: release its smem and add
  // its product (in d) into acc while the newer one runs.
  auto promote = [&](float(&d)[64], int stage) {
    wgmma_wait<1>();
    fence_regs(d);
    if (lane == 0) mbar_arrive(pipe.empty(stage));
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] += d[i];
  };
  for (int32_t t = blockIdx.x; t < total; t += gridDim.x) {
    int32_t mt, nt;
    tile_coords(t, p.m_tiles, p.n_tiles, mt, nt);
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    issue(d0);
    int32_t kb = 1;
    for (; kb + 1 < k_blocks; kb += 2) {
      int older = prev;
      issue(d1);
      promote(d0, older);
      older = prev;
      issue(d0);
      promote(d1, older);
    }
    // The last stage's product: d1 where one stage is left to issue, else d0.
    auto finish = [&](float(&last)[64]) {
      wgmma_wait<0>();
      fence_regs(last);
      if (lane == 0) mbar_arrive(pipe.empty(prev));
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] += last[i];
    };
    if (kb < k_blocks) {
      const int older = prev;
      issue(d1);
      promote(d0, older);
      finish(d1);
    } else {
      finish(d0);
    }
    // Epilogue: g and u rounded to bf16 as an unscaled FP8 GEMM's bf16 output
    // holds them, times the row's and the column's scale in scaled_silu_mul's
    // order, then silu(g) * u in f32 (fast exp / divide, as the bf16 kernel):
    // the result differs from the cuBLASLt + silu_mul_quantize_fp8 path only
    // where the summation orders round g or u differently. One bf16 pair a
    // store.
    const int32_t row = mt * kBlockM + consumer * 64 + warp * 16 + g;
    const int32_t col0 = nt * kBlockN + 2 * t4;
    float rs[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      rs[half] = row + 8 * half < p.m ? p.x_scale[row + 8 * half] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // gate columns 8 j + 2 t4 + {0, 1}; up: 8 blocks on
      const int32_t c = col0 + 8 * j;
      const float2 cg = *reinterpret_cast<const float2*>(p.w_scale + c);
      const float2 cu = *reinterpret_cast<const float2*>(p.w_scale + p.width + c);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int32_t r = row + 8 * half;
        if (r >= p.m) continue;
        const int i = 4 * j + 2 * half;
        const float g0 = bf16_round(acc[i]) * rs[half] * cg.x;
        const float g1 = bf16_round(acc[i + 1]) * rs[half] * cg.y;
        const float u0 = bf16_round(acc[i + 32]) * rs[half] * cu.x;
        const float u1 = bf16_round(acc[i + 33]) * rs[half] * cu.y;
        *reinterpret_cast<__nv_bfloat162*>(p.act + int64_t{r} * p.width + c) =
            __floats2bfloat162_rn(swiglu(g0, u0), swiglu(g1, u1));
      }
    }
  }
#endif
}

}  // namespace

bool fp8_swiglu_gemm_supported(const __nv_fp8_e4m3* x, const __nv_fp8_e4m3* w, const float* w_scale,
                               int64_t n, int64_t width, int64_t in, const __nv_bfloat16* act) {
  // The epilogue reads column scales in pairs (8-byte loads).
  return n > 0 && in > 0 && in % kBlockK == 0 && width > 0 && width % kBlockN == 0 &&
         n <= INT32_MAX && 2 * width <= INT32_MAX && aligned16(x) && aligned16(w) &&
         aligned16(act) && reinterpret_cast<uintptr_t>(w_scale) % 8 == 0 && device_runs_sm90a();
}

void fp8_swiglu_gemm(const __nv_fp8_e4m3* x, const float* x_scale, const __nv_fp8_e4m3* w,
                     const float* w_scale, int64_t n, int64_t width, int64_t in, __nv_bfloat16* act,
                     cudaStream_t stream) {
  SS_CHECK(x_scale != nullptr && w_scale != nullptr);
  SS_CHECK(fp8_swiglu_gemm_supported(x, w, w_scale, n, width, in, act));
  // Every launch (a host call of ~1 us beside a kernel of >= 1024 rows): the
  // attribute is per device, and a process may drive several.
  SS_CUDA_CHECK(cudaFuncSetAttribute(fp8_swiglu_gemm_kernel,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  constexpr auto kU8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const CUtensorMap map_x = swiglu_common::tensor_map(x, kU8, 1, n, in, in, kBlockM);
  const CUtensorMap map_w = swiglu_common::tensor_map(w, kU8, 1, 2 * width, in, in, kBlockN);
  Params p;
  p.act = act;
  p.x_scale = x_scale;
  p.w_scale = w_scale;
  p.m = static_cast<int32_t>(n);
  p.width = static_cast<int32_t>(width);
  p.k = static_cast<int32_t>(in);
  p.m_tiles = static_cast<int32_t>((n + kBlockM - 1) / kBlockM);
  p.n_tiles = static_cast<int32_t>(width / kBlockN);
  const int64_t tiles = int64_t{p.m_tiles} * p.n_tiles;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(tiles, swiglu_common::sm_count()));
  fp8_swiglu_gemm_kernel<<<grid, kThreads, kSmemBytes, stream>>>(map_x, map_w, p);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

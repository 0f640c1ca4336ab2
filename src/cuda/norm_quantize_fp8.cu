#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/fp8_device.cuh"
#include "cuda/norm_quantize_fp8.h"
#include "cuda/pdl.h"
#include "cuda/row_reduce.cuh"

namespace specstack::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kWarp = 32;
constexpr int kW = 4;  // elements per thread and step, as rmsnorm_kernel<4>

__device__ __forceinline__ void load4(const float* p, float (&v)[kW]) {
  const float4 f = *reinterpret_cast<const float4*>(p);
  v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
}

// One CTA per row of row_threads(dim, kW) threads, each holding kIters
// vectors of kW elements in registers (as add_rmsnorm_kernel<4, kIters>), so
// the row is read once: the sum of squares (after the residual add, written
// back), the bf16 normalized values and their amax, then e4m3 out. The norm
// weights and the delta's column scales (a weight's, constant in a step) load
// before the PDL wait. Same per-thread element order as rmsnorm_kernel<4>,
// so the sums and roundings are its own bit for bit.
// __launch_bounds__(1024): rows past 4096 vectors take 1024 threads, which
// need the kernel within 64 registers (it spills at kIters 8 rather than
// failing to launch).
template <bool kAdd, int kIters>
__global__ void __launch_bounds__(1024)
    norm_quantize_kernel(float* x, const bf16* delta, const float* delta_row,
                         const float* delta_col, const float* w, float eps, int32_t dim, fp8* q,
                         float* q_scale) {
  float g[kIters][kW], dc[kIters][kW], v[kIters][kW];
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * kW;
    if (c >= dim) continue;
    load4(w + c, g[k]);
    if (kAdd && delta_col != nullptr) load4(delta_col + c, dc[k]);
  }
  pdl_begin();
  // Read before the barriers, so q_scale may alias delta_row (thread 0
  // writes q_scale[r] only after two of them).
  const float delta_rs = delta_col != nullptr ? delta_row[blockIdx.x] : 1.0f;
  __shared__ float partials[kWarp];
  const int64_t r = blockIdx.x;
  float* xr = x + r * dim;  // [dim]
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * kW;
    if (c >= dim) continue;
    load4(xr + c, v[k]);
    if constexpr (kAdd) {
      const uint2 raw = *reinterpret_cast<const uint2*>(delta + r * dim + c);
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float2 d0 = __bfloat1622float2(pairs[0]), d1 = __bfloat1622float2(pairs[1]);
      float d[kW] = {d0.x, d0.y, d1.x, d1.y};
      if (delta_col != nullptr) {  // as scale_outer_bf16 leaves the delta
#pragma unroll
        for (int e = 0; e < kW; ++e)
          d[e] = __bfloat162float(__float2bfloat16(fp8_dequant(d[e], delta_rs, dc[k][e])));
      }
#pragma unroll
      for (int e = 0; e < kW; ++e) v[k][e] += d[e];
      *reinterpret_cast<float4*>(xr + c) = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
    }
#pragma unroll
    for (int e = 0; e < kW; ++e) ss += v[k][e] * v[k][e];
  }
  const float total = block_sum(ss, partials);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * kW;
    if (c >= dim) continue;
#pragma unroll
    for (int e = 0; e < kW; ++e) {  // HF order, rounded to bf16 as rmsnorm stores it
      v[k][e] = __bfloat162float(__float2bfloat16(g[k][e] * (v[k][e] * inv_rms)));
      amax = fmaxf(amax, fabsf(v[k][e]));
    }
  }
  amax = block_max(amax, partials);
  if (threadIdx.x == 0) q_scale[r] = fp8_row_scale(amax);
  const float inv = fp8_row_factor(amax);
  auto* qr = reinterpret_cast<uint32_t*>(q + r * dim);
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * kW;
    if (c >= dim) continue;
    const uint32_t lo = fp8_pair(v[k][0], v[k][1], inv), hi = fp8_pair(v[k][2], v[k][3], inv);
    qr[c / kW] = lo | (hi << 16);
  }
}

// For launch_norm (row_reduce.cuh: the fewest register passes that hold a
// row; dim <= 8 x 1024 x kW: norm_quantize_fp8_supported).
template <int W, int kIters>
struct NormQuantizeKernel {
  static constexpr auto fn = norm_quantize_kernel<false, kIters>;
};
template <int W, int kIters>
struct AddNormQuantizeKernel {
  static constexpr auto fn = norm_quantize_kernel<true, kIters>;
};

void check_operands(const char* what, const float* x, const float* w, int32_t dim) {
  if (!norm_quantize_fp8_supported(x, w, dim)) {
    fail_cuda(what, "dim must be a multiple of 16 up to 32768, x and w 16-byte aligned", __FILE__,
              __LINE__);
  }
}

}  // namespace

bool norm_quantize_fp8_supported(const float* x, const float* w, int32_t dim) {
  // dim <= 32768: a row in at most 8 register passes of 1024 threads x kW.
  return dim > 0 && dim % 16 == 0 && dim <= 32768 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void rmsnorm_quantize_fp8(const float* x, const float* w, float eps, int32_t rows, int32_t dim,
                          fp8* q, float* q_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  check_operands("rmsnorm_quantize_fp8", x, w, dim);
  launch_norm<kW, NormQuantizeKernel>(rows, dim, stream, const_cast<float*>(x),
                                      static_cast<const bf16*>(nullptr),
                                      static_cast<const float*>(nullptr),
                                      static_cast<const float*>(nullptr), w, eps, dim, q, q_scale);
}

void add_rmsnorm_quantize_fp8(float* x, const bf16* delta, const Fp8Scales& delta_scales,
                              const float* w, float eps, int32_t rows, int32_t dim, fp8* q,
                              float* q_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  check_operands("add_rmsnorm_quantize_fp8", x, w, dim);
  if (reinterpret_cast<uintptr_t>(delta) % 8 != 0) {
    fail_cuda("add_rmsnorm_quantize_fp8", "delta must be 8-byte aligned", __FILE__, __LINE__);
  }
  if ((delta_scales.row == nullptr) != (delta_scales.col == nullptr)) {
    fail_cuda("add_rmsnorm_quantize_fp8", "delta scales need both row and column scales", __FILE__,
              __LINE__);
  }
  launch_norm<kW, AddNormQuantizeKernel>(rows, dim, stream, x, delta, delta_scales.row,
                                         delta_scales.col, w, eps, dim, q, q_scale);
}

}  // namespace specstack::cuda

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

// One CTA per row. Pass 1 (as add_rmsnorm_kernel<4> with kAdd, else as
// rmsnorm_kernel<4>): the sum of squares. Pass 2: the bf16 normalized row
// into shared memory with its amax. Pass 3: e4m3 out. Each thread touches
// the same columns in every pass, so only the reductions need barriers.
template <bool kAdd>
__global__ void norm_quantize_kernel(float* x, const bf16* delta, const float* delta_row,
                                     const float* delta_col, const float* w, float eps, int32_t dim,
                                     fp8* q, float* q_scale) {
  pdl_begin();
  // Read before the barriers, so q_scale may alias delta_row (thread 0
  // writes q_scale[r] only after two of them).
  const float delta_rs = delta_col != nullptr ? delta_row[blockIdx.x] : 1.0f;
  __shared__ float partials[kWarp];
  extern __shared__ uint2 staged[];  // [dim / 4]: 4 bf16 each
  const int64_t r = blockIdx.x;
  float* xr = x + r * dim;  // [dim]
  float ss = 0.0f;
  for (int c = threadIdx.x * kW; c < dim; c += blockDim.x * kW) {
    const float4 f = *reinterpret_cast<const float4*>(xr + c);
    float v[kW] = {f.x, f.y, f.z, f.w};
    if constexpr (kAdd) {
      const uint2 raw = *reinterpret_cast<const uint2*>(delta + r * dim + c);
      const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
      const float2 d0 = __bfloat1622float2(pairs[0]), d1 = __bfloat1622float2(pairs[1]);
      float d[kW] = {d0.x, d0.y, d1.x, d1.y};
      if (delta_col != nullptr) {  // as scale_outer_bf16 leaves the delta
#pragma unroll
        for (int k = 0; k < kW; ++k)
          d[k] = __bfloat162float(__float2bfloat16(fp8_dequant(d[k], delta_rs, delta_col[c + k])));
      }
#pragma unroll
      for (int k = 0; k < kW; ++k) {
        v[k] += d[k];
        ss += v[k] * v[k];
      }
      *reinterpret_cast<float4*>(xr + c) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
      for (int k = 0; k < kW; ++k) ss += v[k] * v[k];
    }
  }
  const float total = block_sum(ss, partials);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  float amax = 0.0f;
  for (int c = threadIdx.x * kW; c < dim; c += blockDim.x * kW) {
    const float4 f = *reinterpret_cast<const float4*>(xr + c);
    const float4 g = *reinterpret_cast<const float4*>(w + c);
    uint2 raw;
    auto* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
    pairs[0] = __floats2bfloat162_rn(g.x * (f.x * inv_rms), g.y * (f.y * inv_rms));  // HF order
    pairs[1] = __floats2bfloat162_rn(g.z * (f.z * inv_rms), g.w * (f.w * inv_rms));
    staged[c / kW] = raw;
    const float2 a = __bfloat1622float2(pairs[0]), b = __bfloat1622float2(pairs[1]);
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(a.x), fabsf(a.y)), fmaxf(fabsf(b.x), fabsf(b.y))));
  }
  amax = block_max(amax, partials);
  if (threadIdx.x == 0) q_scale[r] = fp8_row_scale(amax);
  const float inv = fp8_row_factor(amax);
  auto* qr = reinterpret_cast<uint32_t*>(q + r * dim);
  for (int c = threadIdx.x * kW; c < dim; c += blockDim.x * kW) {
    const uint2 raw = staged[c / kW];
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 a = __bfloat1622float2(pairs[0]), b = __bfloat1622float2(pairs[1]);
    const uint32_t lo = fp8_pair(a.x, a.y, inv), hi = fp8_pair(b.x, b.y, inv);
    qr[c / kW] = lo | (hi << 16);
  }
}

void check_operands(const char* what, const float* x, const float* w, int32_t dim) {
  if (!norm_quantize_fp8_supported(x, w, dim)) {
    fail_cuda(what, "dim must be a multiple of 16 up to 24576, x and w 16-byte aligned", __FILE__,
              __LINE__);
  }
}

}  // namespace

bool norm_quantize_fp8_supported(const float* x, const float* w, int32_t dim) {
  // dim <= 24576: the staged bf16 row within the default 48 KB of dynamic shared memory.
  return dim > 0 && dim % 16 == 0 && dim <= 24576 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void rmsnorm_quantize_fp8(const float* x, const float* w, float eps, int32_t rows, int32_t dim,
                          fp8* q, float* q_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  check_operands("rmsnorm_quantize_fp8", x, w, dim);
  const size_t smem = static_cast<size_t>(dim) * sizeof(bf16);
  launch_pdl(norm_quantize_kernel<false>, rows, row_threads(dim, kW), smem, stream, true,
             const_cast<float*>(x), static_cast<const bf16*>(nullptr),
             static_cast<const float*>(nullptr), static_cast<const float*>(nullptr), w, eps, dim, q,
             q_scale);
}

void add_rmsnorm_quantize_fp8(float* x, const bf16* delta, const Fp8Scales& delta_scales,
                              const float* w, float eps, int32_t rows, int32_t dim, fp8* q,
                              float* q_scale, cudaStream_t stream) {
  if (rows <= 0) return;
  check_operands("add_rmsnorm_quantize_fp8", x, w, dim);
  if (reinterpret_cast<uintptr_t>(delta) % 8 != 0) {
    fail_cuda("add_rmsnorm_quantize_fp8", "delta must be 8-byte aligned", __FILE__, __LINE__);
  }
  const size_t smem = static_cast<size_t>(dim) * sizeof(bf16);
  if ((delta_scales.row == nullptr) != (delta_scales.col == nullptr)) {
    fail_cuda("add_rmsnorm_quantize_fp8", "delta scales need both row and column scales", __FILE__,
              __LINE__);
  }
  launch_pdl(norm_quantize_kernel<true>, rows, row_threads(dim, kW), smem, stream, true, x, delta,
             delta_scales.row, delta_scales.col, w, eps, dim, q, q_scale);
}

}  // namespace specstack::cuda

#include "cuda/cuda_check.h"
#include "cuda/fp8_device.cuh"
#include "cuda/fp8_quantize.h"
#include "cuda/pdl.h"
#include "cuda/swiglu_math.cuh"

namespace specstack::cuda {

namespace {

constexpr int kThreads = 256;

// The row's amax across a block of kBlockThreads (warp shuffles, then one
// shared-memory pass), the same value in every thread; then the row's scale
// written by thread 0 and the factor x -> e4m3 returned (fp8_device.cuh).
template <int kBlockThreads>
__device__ inline float row_scale_from_amax(float amax, float* __restrict__ scale_out) {
  __shared__ float warp_max[kBlockThreads / 32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  }
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kBlockThreads / 32; ++w) amax = fmaxf(amax, warp_max[w]);
  if (threadIdx.x == 0) *scale_out = fp8_row_scale(amax);
  return fp8_row_factor(amax);
}

// One block per row, 8 elements (16 bytes of bf16) per thread and step.
// Pass 1: the row's amax with a block reduction; pass 2 re-reads the row (now
// in L1/L2: rows are at most a few tens of KB) and writes 8 e4m3 bytes at once.
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const __nv_bfloat16* __restrict__ x, int64_t ldx, int64_t cols,
                         fp8* __restrict__ q, float* __restrict__ scale) {
  pdl_begin();
  const int64_t row = blockIdx.x;
  const auto* xr = reinterpret_cast<const uint4*>(x + row * ldx);
  auto* qr = reinterpret_cast<uint2*>(q + row * cols);
  const int64_t vectors = cols / 8;
  float amax = 0.0f;
  for (int64_t v = threadIdx.x; v < vectors; v += kThreads) amax = fp8_amax8(xr[v], amax);
  const float inv = row_scale_from_amax<kThreads>(amax, &scale[row]);
  for (int64_t v = threadIdx.x; v < vectors; v += kThreads) qr[v] = fp8_to_e4m3x8(xr[v], inv);
}

// One thread per output element (columns or ldy not a multiple of 8).
__global__ void scale_outer_kernel(__nv_bfloat16* __restrict__ y, int64_t ldy, int64_t cols,
                                   const float* __restrict__ row_scale,
                                   const float* __restrict__ col_scale,
                                   const float* __restrict__ bias) {
  pdl_begin();
  const int64_t row = blockIdx.y;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x);
  if (c >= cols) return;
  const float rs = row_scale[row];
  const float v = __bfloat162float(y[row * ldy + c]);
  y[row * ldy + c] = __float2bfloat16(bias != nullptr ? fp8_dequant(v, rs, col_scale[c], bias[c])
                                                      : fp8_dequant(v, rs, col_scale[c]));
}

// f32 output, one thread per element (the FP8 LM head's logits).
__global__ void scale_outer_f32_kernel(float* __restrict__ y, int64_t ldy, int64_t cols,
                                       const float* __restrict__ row_scale,
                                       const float* __restrict__ col_scale) {
  pdl_begin();
  const int64_t row = blockIdx.y;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  y[row * ldy + c] = fp8_dequant(y[row * ldy + c], row_scale[row], col_scale[c]);
}

// 8 elements (one 16-byte load and store) per thread.
__global__ void scale_outer8_kernel(__nv_bfloat16* __restrict__ y, int64_t ldy, int64_t cols,
                                    const float* __restrict__ row_scale,
                                    const float* __restrict__ col_scale,
                                    const float* __restrict__ bias) {
  pdl_begin();
  const int64_t row = blockIdx.y;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= cols) return;
  const float rs = row_scale[row];
  auto* at = reinterpret_cast<uint4*>(y + row * ldy + c);
  uint4 packed = *at;
  auto* v2 = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 f = __bfloat1622float2(v2[i]);
    const int64_t c0 = c + 2 * i;
    if (bias != nullptr) {
      f.x = fp8_dequant(f.x, rs, col_scale[c0], bias[c0]);
      f.y = fp8_dequant(f.y, rs, col_scale[c0 + 1], bias[c0 + 1]);
    } else {
      f.x = fp8_dequant(f.x, rs, col_scale[c0]);
      f.y = fp8_dequant(f.y, rs, col_scale[c0 + 1]);
    }
    v2[i] = __floats2bfloat162_rn(f.x, f.y);
  }
  *at = packed;
}

// 8 consecutive floats from 32-byte aligned memory (two 16-byte loads).
__device__ inline void load8(const float* __restrict__ p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

// 8 columns c.. of act from 8 gate and 8 up values: bf16(silu(g) * u), each
// scaled by rs * col_scale[column] when col_scale is set. One function for
// both kernels below, so the fused one is bit-identical to the pair. The
// SwiGLU is the fused kernels' fast one (swiglu_math.cuh): with expf and an
// IEEE divide this pass was instruction-bound (477 us a layer for 775 MB at
// 8K rows of qwen2.5-7b on an H200, 1.6 TB/s; session 41); its output is
// quantized to e4m3 (2^-4) right after. col_scale and width: 8-aligned.
__device__ inline void silu8(const uint4& g, const uint4& u, float rs,
                             const float* __restrict__ col_scale, int64_t width, int64_t c,
                             uint4& out) {
  const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&g);
  const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&u);
  auto* o2 = reinterpret_cast<__nv_bfloat162*>(&out);
  float gs[8], us[8];
  if (col_scale != nullptr) {
    load8(col_scale + c, gs);
    load8(col_scale + width + c, us);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 gf = __bfloat1622float2(g2[i]);
    const float2 uf = __bfloat1622float2(u2[i]);
    float ga = gf.x, gb = gf.y, ua = uf.x, ub = uf.y;
    if (col_scale != nullptr) {
      ga = ga * rs * gs[2 * i];
      gb = gb * rs * gs[2 * i + 1];
      ua = ua * rs * us[2 * i];
      ub = ub * rs * us[2 * i + 1];
    }
    o2[i] = __floats2bfloat162_rn(swiglu(ga, ua), swiglu(gb, ub));
  }
}

// 8 output columns per thread: 16-byte loads of the gate and up halves.
__global__ void scaled_silu_mul_kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t width,
                                       const float* __restrict__ row_scale,
                                       const float* __restrict__ col_scale,
                                       __nv_bfloat16* __restrict__ act) {
  pdl_begin();
  const int64_t row = blockIdx.y;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (c >= width) return;
  const float rs = row_scale[row];
  const __nv_bfloat16* in = gate_up + row * 2 * width;
  const uint4 g = *reinterpret_cast<const uint4*>(in + c);
  const uint4 u = *reinterpret_cast<const uint4*>(in + width + c);
  uint4 out;
  silu8(g, u, rs, col_scale, width, c, out);
  *reinterpret_cast<uint4*>(act + row * width + c) = out;
}

// One block per row: the bf16 SiLU row into shared memory with its amax,
// then e4m3 out as quantize_rows_kernel does.
constexpr int kSiluQuantThreads = 512;
__global__ void __launch_bounds__(kSiluQuantThreads)
    silu_mul_quantize_kernel(const __nv_bfloat16* __restrict__ gate_up, int64_t width,
                             const float* __restrict__ row_scale,
                             const float* __restrict__ col_scale, fp8* __restrict__ q,
                             float* __restrict__ q_scale) {
  pdl_begin();
  extern __shared__ uint4 staged[];  // [width / 8] bf16 x 8
  const int64_t row = blockIdx.x;
  const float rs = row_scale != nullptr ? row_scale[row] : 1.0f;
  const __nv_bfloat16* in = gate_up + row * 2 * width;
  const int64_t vectors = width / 8;
  float amax = 0.0f;
  for (int64_t v = threadIdx.x; v < vectors; v += kSiluQuantThreads) {
    const uint4 g = *reinterpret_cast<const uint4*>(in + v * 8);
    const uint4 u = *reinterpret_cast<const uint4*>(in + width + v * 8);
    uint4 out;
    silu8(g, u, rs, col_scale, width, v * 8, out);
    staged[v] = out;
    amax = fp8_amax8(out, amax);
  }
  const float inv = row_scale_from_amax<kSiluQuantThreads>(amax, &q_scale[row]);
  auto* qr = reinterpret_cast<uint2*>(q + row * width);
  for (int64_t v = threadIdx.x; v < vectors; v += kSiluQuantThreads)
    qr[v] = fp8_to_e4m3x8(staged[v], inv);
}

}  // namespace

void quantize_rows_fp8(const __nv_bfloat16* x, int64_t ldx, int64_t rows, int64_t cols, fp8* q,
                       float* scale, cudaStream_t stream, bool pdl) {
  if (rows == 0) return;
  if (cols % 8 != 0 || ldx % 8 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    fail_cuda("quantize_rows_fp8", "rows must be 16-byte aligned with cols a multiple of 8",
              __FILE__, __LINE__);
  }
  launch_pdl(quantize_rows_kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), 0, stream,
             pdl, x, ldx, cols, q, scale);
}

void scale_outer_bf16(__nv_bfloat16* y, int64_t ldy, int64_t rows, int64_t cols,
                      const float* row_scale, const float* col_scale, const float* bias,
                      cudaStream_t stream) {
  if (rows == 0) return;
  const bool vec8 = cols % 8 == 0 && ldy % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
  const int64_t per_thread = vec8 ? 8 : 1;
  const dim3 grid(static_cast<unsigned>((cols / per_thread + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows));
  launch_pdl(vec8 ? scale_outer8_kernel : scale_outer_kernel, grid, dim3(kThreads), 0, stream, true,
             y, ldy, cols, row_scale, col_scale, bias);
}

void scale_outer_f32(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* row_scale,
                     const float* col_scale, cudaStream_t stream) {
  if (rows == 0) return;
  const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows));
  launch_pdl(scale_outer_f32_kernel, grid, dim3(kThreads), 0, stream, true, y, ldy, cols, row_scale,
             col_scale);
}

void scaled_silu_mul(const __nv_bfloat16* gate_up, int64_t rows, int64_t width,
                     const float* row_scale, const float* col_scale, __nv_bfloat16* act,
                     cudaStream_t stream) {
  if (rows == 0) return;
  if (width % 8 != 0 || reinterpret_cast<uintptr_t>(gate_up) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(act) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(col_scale) % 16 != 0) {
    fail_cuda("scaled_silu_mul",
              "width must be a multiple of 8, rows and column scales 16-byte aligned", __FILE__,
              __LINE__);
  }
  const dim3 grid(static_cast<unsigned>((width / 8 + kThreads - 1) / kThreads),
                  static_cast<unsigned>(rows));
  launch_pdl(scaled_silu_mul_kernel, grid, dim3(kThreads), 0, stream, true, gate_up, width,
             row_scale, col_scale, act);
}

void silu_mul_quantize_fp8(const __nv_bfloat16* gate_up, int64_t rows, int64_t width,
                           const float* row_scale, const float* col_scale, fp8* q, float* q_scale,
                           cudaStream_t stream) {
  if (rows == 0) return;
  if (width % 8 != 0 || reinterpret_cast<uintptr_t>(gate_up) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(col_scale) % 16 != 0) {
    fail_cuda("silu_mul_quantize_fp8",
              "width must be a multiple of 8, rows and column scales 16-byte aligned", __FILE__,
              __LINE__);
  }
  const size_t smem = static_cast<size_t>(width) * sizeof(__nv_bfloat16);
  if (smem > 48 * 1024) {  // past the default dynamic limit (e.g. 70B-class MLPs)
    SS_CUDA_CHECK(cudaFuncSetAttribute(silu_mul_quantize_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  }
  launch_pdl(silu_mul_quantize_kernel, dim3(static_cast<unsigned>(rows)), dim3(kSiluQuantThreads),
             smem, stream, true, gate_up, width, row_scale, col_scale, q, q_scale);
}

}  // namespace specstack::cuda

// The SwiGLU product silu(g) u in f32 as the prefill kernels compute it: the
// fused SwiGLU GEMMs' epilogues (swiglu_gemm_common.cuh) and the FP8 path's
// SiLU passes (fp8_quantize.cu). The bf16 decode and small-batch passes
// (elementwise.cu silu_mul, gemv.cu) keep expf and the IEEE divide.
#pragma once

namespace specstack::cuda {

// The fast exp and divide (ex2.approx / rcp.approx, a few f32 ulps; the bf16
// output rounds at 2^-9, an e4m3 one at 2^-4). tanh.approx would be one MUFU
// op instead of two, but its ~2^-11 absolute error near tanh = -1 wipes out
// silu(g) for g < -6 (h + h tanh(h) cancels): not used. Past g ~ -88, exp(-g)
// is inf or beyond 2^126 and the quotient 0 (silu is then below 2^-120).
__device__ __forceinline__ float swiglu(float g, float u) {
  return __fdividef(g, 1.0f + __expf(-g)) * u;
}

}  // namespace specstack::cuda

// RMSNorm whose output goes straight to e4m3 with its per-token scale, for
// when the next linear is an FP8 GEMM (--quantization fp8, prefill rows):
// the norm's bf16 row never reaches device memory and the GEMM's separate
// activation-quantize pass (quantize_rows_fp8, ~37 us per 8192 x 3584 call
// on the H100) goes. Bit-identical to rmsnorm / add_rmsnorm (elementwise.h)
// followed by quantize_rows_fp8 (fp8_quantize.h): the same reduction order
// (same threads per row, same per-thread sums), the same bf16 rounding of
// the normalized row, the same amax, factor and e4m3 rounding
// (fp8_device.cuh). Tested against that pair in tests/cuda/fp8_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fp8_quantize.h"

namespace specstack::cuda {

// Whether the fused kernels take these operands (dim a multiple of 16 up to
// 32768, x and w 16-byte aligned: cases where rmsnorm runs its 4-wide kernel).
bool norm_quantize_fp8_supported(const float* x, const float* w, int32_t dim);

// q[r, :] = e4m3(bf16(rmsnorm(x[r, :]) * w) / q_scale[r]), q_scale[r] = amax / 448.
// x [rows, dim] f32, w [dim] f32, q [rows, dim] e4m3 (dense), q_scale [rows] f32.
void rmsnorm_quantize_fp8(const float* x, const float* w, float eps, int32_t rows, int32_t dim,
                          fp8* q, float* q_scale, cudaStream_t stream);

// The residual add first, as add_rmsnorm: x[r, :] += f32(delta[r, :]) (in
// place), then q / q_scale as above.   delta [rows, dim] bf16.
// delta_scales set: delta is an unscaled FP8 GEMM output (the o / down
// projection at prefill rows), each element taken as
// bf16(fp8_dequant(delta, row[r], col[c])) first, bit-identical to
// scale_outer_bf16 then this, without that pass over [rows, dim].
// delta_scales.row may be q_scale itself: each row's is read before written.
void add_rmsnorm_quantize_fp8(float* x, const __nv_bfloat16* delta, const Fp8Scales& delta_scales,
                              const float* w, float eps, int32_t rows, int32_t dim, fp8* q,
                              float* q_scale, cudaStream_t stream);

}  // namespace specstack::cuda

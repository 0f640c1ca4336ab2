// Memory-bound kernels of the forward pass on bf16 activations with an f32
// residual stream. Every launcher enqueues on `stream` and checks the launch.
// Pointers are device pointers unless noted; shapes are in elements.
// CPU twins: the CpuBackend ops of the same name (tests/cuda compares them).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

using bf16 = __nv_bfloat16;

// out[i, :] = f32(table[ids[i], :]).   table [vocab, dim] bf16, ids [n] i32, out [n, dim] f32
void embedding(const bf16* table, const int32_t* ids, int32_t n, int32_t dim, float* out,
               cudaStream_t stream);

// y[i, :] = bf16(w * x[r, :] / sqrt(mean(x[r, :]^2) + eps)) with r = row_ids ? row_ids[i] : i,
// fp32 math.   x [*, dim] f32, w [dim] f32, row_ids [rows] i32 or null, y [rows, dim] bf16
void rmsnorm(const float* x, const int32_t* row_ids, const float* w, float eps, int32_t rows,
             int32_t dim, bf16* y, cudaStream_t stream);

// The residual add fused with the next norm: x[r, :] += f32(delta[r, :]); then
// y[r, :] = bf16(rmsnorm(x[r, :]) * w).   x [rows, dim] f32 (in place),
// delta [rows, dim] bf16, w [dim] f32, y [rows, dim] bf16
void add_rmsnorm(float* x, const bf16* delta, const float* w, float eps, int32_t rows, int32_t dim,
                 bf16* y, cudaStream_t stream);

// Per-head RMSNorm in place (qwen3 q_norm / k_norm): head h of token t is
// x[t * ld + h * head_dim + (0..head_dim)].   w [head_dim] f32
void head_rmsnorm(bf16* x, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t head_dim,
                  const float* w, float eps, cudaStream_t stream);

// HF rotate_half RoPE in place, angle = f32(positions[t]) * inv_freq[j] (fp32
// product, accurate sincos): head h of token t at x[t * ld + h * head_dim];
// dims j and j + head_dim/2 rotate together.   positions [n_tokens] i32,
// inv_freq [head_dim / 2] f32
void rope(bf16* x, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq, cudaStream_t stream);

// x[r, c] = bf16(f32(x[r, c]) + bias[c]) in place.   x rows with stride ld, bias [cols] f32
void add_bias(bf16* x, int32_t rows, int32_t cols, int64_t ld, const float* bias,
              cudaStream_t stream);

// out[r, :] = bf16(silu(gate) * up) in fp32 with gate = gate_up[r, 0:width] and
// up = gate_up[r, width:2*width] (the fused gate/up GEMM output).
// gate_up [rows, 2 * width] bf16, out [rows, width] bf16 (must not alias gate_up)
void silu_mul(const bf16* gate_up, int32_t rows, int32_t width, bf16* out, cudaStream_t stream);

// Writes token t's K and V rows into physical slot slot_mapping[t] (= block *
// block_size + offset) of the paged caches and records positions[t] there.
// k, v rows of kv_width with stride ld; caches [n_blocks * block_size, kv_width]
// bf16; slot_positions [n_blocks * block_size] i32. slot_mapping < 0 skips the
// token (padding rows of a captured graph).
void write_kv(const bf16* k, const bf16* v, int64_t ld, int32_t n_tokens, int32_t kv_width,
              const int32_t* slot_mapping, const int32_t* positions, bf16* k_cache, bf16* v_cache,
              int32_t* slot_positions, cudaStream_t stream);

// dst[i, :] = src[rows[i], :].   src rows of `cols` with stride ld_src, dst [n, cols]
// pdl: programmatic dependent launch (cuda/pdl.h), off right after a copy.
void gather_rows(const bf16* src, int64_t ld_src, const int32_t* rows, int32_t n, int32_t cols,
                 bf16* dst, cudaStream_t stream, bool pdl = true);

// dst[i * ld_dst + c] = src[i * ld_src + c] for i < n, c < cols: a strided
// device copy as a kernel (launched as a programmatic dependent, so unlike a
// memcpy node it keeps the next kernel's PDL edge: a capture graph's query rows).
void copy_rows(const bf16* src, int64_t ld_src, int32_t n, int32_t cols, bf16* dst, int64_t ld_dst,
               cudaStream_t stream);

// out[rows[i], :] += weights[i] * f32(src[i, :]) (rows distinct within one call).
// src [n, cols] bf16, out [*, cols] f32
void scatter_add_weighted(const bf16* src, const int32_t* rows, const float* weights, int32_t n,
                          int32_t cols, float* out, cudaStream_t stream);

// dst[i] = bf16(src[i]) for a host-dtype source already on the device:
// src_dtype 0 = f32, 1 = bf16 (copy), 2 = f16.
void convert_to_bf16(const void* src, int src_dtype, int64_t n, bf16* dst, cudaStream_t stream);

// The --dummy-weights fill on the device, bit-identical to the CPU's
// DummySource: element i = bf16(amplitude * (u(i) * 2 - 1)) with u from the
// splitmix-style hash of stream_seed + i * golden (see model/weights.cpp).
void fill_dummy_bf16(bf16* dst, int64_t n, uint64_t stream_seed, float amplitude,
                     cudaStream_t stream);

}  // namespace specstack::cuda

// RoPE on a step's q and k heads fused with the paged KV write: one launch
// per layer where rope() + write_kv() took two. At batch-1 decode each of
// those is a few microseconds of mostly latency (ncu: ~7 us + ~4 us per
// layer on an H100), so the fusion is worth ~0.15 ms per 7B token.
// CPU twin: CpuBackend::rope then write_kv; GPU twin: rope() + write_kv()
// (tests/cuda/rope_kv_test.cpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

// qkv [n_tokens, ld] bf16 rows of q (n_heads heads) | k (n_kv_heads) | v
// (n_kv_heads), head_dim each. Rotates q and k in place (HF rotate_half,
// angle = f32(positions[t]) * inv_freq[j], accurate sincos), then writes the
// rotated k and the v of token t into physical slot slot_mapping[t] of the
// caches [n_slots, n_kv_heads * head_dim] and positions[t] into
// slot_positions (slot_mapping < 0: rotate only, no write).
// qkv_bias [(n_heads + 2 * n_kv_heads) * head_dim] f32, optional: added to
// each row first and rounded to bf16, as add_bias() would (so the result is
// bit-identical to add_bias then this), saving that launch per layer when
// the QKV projection is a cuBLAS GEMM (Gemm::fuses_bias false).
void rope_write_kv(__nv_bfloat16* qkv, int32_t n_tokens, int64_t ld, int32_t n_heads,
                   int32_t n_kv_heads, int32_t head_dim, const int32_t* positions,
                   const float* inv_freq, const int32_t* slot_mapping, __nv_bfloat16* k_cache,
                   __nv_bfloat16* v_cache, int32_t* slot_positions, const float* qkv_bias,
                   cudaStream_t stream);

// What rope_write_kv applies to each qkv element before rotating it: an
// unscaled FP8 GEMM's dequantization (--quantization fp8 prefill, where the
// QKV projection runs unscaled and its scales ride here instead of in a
// separate scale_outer_bf16 pass over [n, qkv_width]) and/or the bias.
struct QkvEpilogue {
  const float* row_scale = nullptr;  // [n_tokens] per-token activation scales
  const float* col_scale = nullptr;  // [qkv_width] weight scales; set together with row_scale
  const float* bias = nullptr;       // [qkv_width]
};

// The same with the scales: every element becomes bf16(fp8_dequant(y,
// row_scale[t], col_scale[i], bias[i])) (fp8_device.cuh) before the rotation,
// bit-identical to scale_outer_bf16 (with the bias) and then rope_write_kv.
void rope_write_kv(__nv_bfloat16* qkv, int32_t n_tokens, int64_t ld, int32_t n_heads,
                   int32_t n_kv_heads, int32_t head_dim, const int32_t* positions,
                   const float* inv_freq, const int32_t* slot_mapping, __nv_bfloat16* k_cache,
                   __nv_bfloat16* v_cache, int32_t* slot_positions, const QkvEpilogue& epilogue,
                   cudaStream_t stream);

}  // namespace specstack::cuda

// Batch-1 decode: the QKV projection of one token with RoPE and the paged KV
// write in its epilogue: one launch where the GEMV and rope_write_kv took two.
// A decode step is a chain of small kernels, each a few microseconds of
// mostly latency, so a launch less per layer is worth more than its bytes
// (H100, docs/benchmarks.md "session 30").
//
// Each CTA computes a PAIR of output rows, 4 warps each (the split the
// one-row GEMVs use at these widths): rows (h * D + j, h * D + j + D / 2) of
// a q or k head, rotated together in the epilogue, or two adjacent v rows.
// The rows' sums, bias, scales and rounding are those of gemv() / fp8_gemv()
// at one row with split 4, and the rotation is rope_write_kv's, so the
// outputs equal gemv (or fp8_gemv) followed by rope_write_kv bit for bit
// (tests/cuda/qkv_rope_gemv_test.cpp). Models with q/k norms (between the
// projection and the rotation) keep the two launches, and so, by measurement,
// do e4m3 weights (CudaModel::attention says why); the kernel's FP8 path is
// kept and tested for the shapes where that may turn.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fp8_quantize.h"

namespace specstack::cuda {

struct QkvRopeArgs {
  const __nv_bfloat16* x = nullptr;     // [in] the token's normed hidden state
  const __nv_bfloat16* w16 = nullptr;   // [qkv_width, in] bf16, or
  const fp8* w8 = nullptr;              // [qkv_width, in] e4m3 with
  const float* w_scale = nullptr;       // [qkv_width] per-row scales
  const float* bias = nullptr;          // [qkv_width] or null
  int64_t in = 0;                       // hidden size
  int32_t n_heads = 0, n_kv_heads = 0;  // q heads, k (= v) heads
  int32_t head_dim = 0;                 // even
  const int32_t* position = nullptr;    // [1] the token's position
  const float* inv_freq = nullptr;      // [head_dim / 2]
  const int32_t* slot = nullptr;        // [1] its physical cache slot; < 0: rotate only
  __nv_bfloat16* qkv = nullptr;         // [qkv_width] out: rotated q | rotated k | v
  __nv_bfloat16* k_cache = nullptr;     // [n_slots, n_kv_heads * head_dim]
  __nv_bfloat16* v_cache = nullptr;     // [n_slots, n_kv_heads * head_dim]
  int32_t* slot_positions = nullptr;    // [n_slots]
};

// Exactly one of w16 / w8; x and the weights 16-byte aligned; `in` a
// multiple of 8 (bf16) or 16 (e4m3); head_dim even.
bool qkv_rope_gemv_supported(const QkvRopeArgs& a);

// Launched as a programmatic dependent (cuda/pdl.h): the weights' first
// lines, the bias, the scales and the angle are read before the wait.
void qkv_rope_gemv(const QkvRopeArgs& a, cudaStream_t stream);

}  // namespace specstack::cuda

// FP8 (e4m3) prefill attention for Hopper: the contract of flash_attention.h
// (one sequence's chunk of queries against its paged bf16 K/V, causal), with
// both GEMMs of the attention (S = Q K^T and O = P V) on the e4m3 tensor cores
// at twice the bf16 rate, as FlashAttention-3's FP8 forward. The KV cache
// stays bf16: each call quantizes what it reads.
//
// Precision (what differs from the bf16 kernel):
//  * K and V are quantized per channel: one scale per (kv head, dim) over the
//    call's keys [0, n_keys) (amax / 448). K's channel scales fold into Q
//    (q . k = sum_d (q_d sk_d) k^_d), V's into the output columns, so the
//    kernel's inner loop has no per-key scale. Per channel suits K, whose
//    outliers (Qwen2's k bias) sit in fixed dims.
//  * Q (times K's channel scales) is quantized per (row, head); that scale
//    joins the softmax scale of its row.
//  * P = exp(S - running max) in [0, 1] is rounded to e4m3 for the P V GEMM;
//    the softmax denominator sums P before rounding (as FlashAttention-3).
// The result is within a few percent (relative, per row) of the exact
// attention; flash_attention_fp8_reference (tests) follows the same steps on
// the CPU. Only causal masks (no sliding window) and head dims 64 / 128.
//
// Steps, all on `stream`: channel amax of K and V (atomics), K quantized to
// [kv_head, key, dim] e4m3 and V to [kv_head, dim, key] (the K-major operand
// layout e4m3 wgmma needs, keys permuted within each 32-key group so that
// the softmax's accumulator registers are the P fragment as they are), Q
// quantized, then the attention kernel (same warp specialisation and tiling as
// flash_attention_hopper.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/flash_attention.h"

namespace specstack::cuda {

// Bytes of device workspace flash_attention_fp8 needs for these args (256-byte
// aligned sections: channel scales, quantized K, V^T, Q and Q's scales).
size_t flash_attention_fp8_workspace_bytes(const FlashAttentionArgs& args);

// True where the kernel runs these args: flash_attention_hopper_supported's
// conditions, no sliding window, and a Hopper device with the sm_90a image.
bool flash_attention_fp8_supported(const FlashAttentionArgs& args);

// The fewest keys at which the e4m3 path (its quantizing passes included) ran
// faster than the bf16 kernel on an H100 (flash_attention_bench, session 46,
// the passes with their loads in flight): head dim 128 from 8192 keys (1.17x;
// 4096 0.99x, 1696 0.75x), head dim 64 from 16384 (1.08x; 8192 1.00x, a tie:
// at head dim 64 the softmax, not the GEMMs, bounds a tile).
int32_t flash_attention_fp8_min_keys(int32_t head_dim);

// Requires flash_attention_fp8_supported(args) and workspace_bytes >=
// flash_attention_fp8_workspace_bytes(args) (device memory, 256-byte aligned).
void flash_attention_fp8(const FlashAttentionArgs& args, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream);

// The quantized operands inside a workspace, for tests (host pointers into
// device memory; sizes from the args as documented above).
struct Fp8AttentionOperands {
  const float* k_scale = nullptr;  // [n_kv_heads, head_dim] amax / 448 (1 for an all-zero channel)
  const float* v_scale = nullptr;  // [n_kv_heads, head_dim]
  const uint8_t* k = nullptr;      // [n_kv_heads, keys_padded, head_dim] e4m3
  const uint8_t* vt = nullptr;     // [n_kv_heads, head_dim, keys_padded] e4m3, permuted keys
  const uint8_t* q = nullptr;      // [n_rows, n_heads, head_dim] e4m3 of q * k_scale
  const float* q_scale = nullptr;  // [n_rows, n_heads]
  int32_t keys_padded = 0;         // n_keys rounded up to the 128-key tile
};
Fp8AttentionOperands flash_attention_fp8_operands(const FlashAttentionArgs& args, void* workspace);

// Key j of a 32-key group sits at position fp8_attention_vt_position(j) of the
// group in the V^T rows (a bijection of 0..31).
int32_t fp8_attention_vt_position(int32_t j);

}  // namespace specstack::cuda

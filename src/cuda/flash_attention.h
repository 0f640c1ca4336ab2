// Prefill attention for one sequence's chunk of queries, fused flash-style
// (FlashAttention-2 forward): tiles of queries stay in registers, tiles of
// keys/values stream from the paged cache through shared memory, scores and
// probabilities never touch device memory, online softmax in fp32, tensor
// cores (mma.sync bf16 -> fp32). This is the long-prompt hot path; the CPU
// twin is CpuBackend::attention and paged_attention (attention.h) is the
// short-chunk / decode path.
//
// Visibility: query row r (slot q_slot[r], position q_pos[r]) sees key slot j
// iff j <= q_slot[r] and (sliding_window == 0 or q_pos[r] - sliding_window <
// key_pos[j]); key_pos comes from slot_positions. Slots of one chunk are
// ascending, so whole key tiles past the chunk's last slot are skipped.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

struct FlashAttentionArgs {
  const __nv_bfloat16* q = nullptr;  // head h of row r at q[r * q_stride + h * head_dim], post-RoPE
  int64_t q_stride = 0;
  const int32_t* q_slot = nullptr;  // [n_rows] ascending
  const int32_t* q_pos = nullptr;   // [n_rows]
  int32_t n_rows = 0;
  const __nv_bfloat16* k_cache = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim]
  const __nv_bfloat16* v_cache = nullptr;  // [n_blocks, block_size, n_kv_heads, head_dim]
  const int32_t* slot_positions = nullptr;  // [n_blocks, block_size]
  const int32_t* block_table = nullptr;     // this sequence's physical blocks (device)
  int32_t block_size = 0;
  int32_t n_keys = 0;  // keys [0, n_keys) exist (>= q_slot[n_rows - 1] + 1)
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;  // 64 or 128 (flash_attention_supported)
  float scale = 1.0f;
  int32_t sliding_window = 0;
  __nv_bfloat16* out = nullptr;  // head h of row r at out[r * out_stride + h * head_dim]
  int64_t out_stride = 0;
};

bool flash_attention_supported(int32_t head_dim);

void flash_attention(const FlashAttentionArgs& args, cudaStream_t stream);

}  // namespace specstack::cuda

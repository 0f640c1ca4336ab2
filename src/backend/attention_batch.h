// What the attention kernels need to know about one step: where each token's
// K/V goes, which sequence it belongs to, and how far back it may look. Built
// from a StepPlan by the model runner.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace specstack {

// One layer's paged KV storage (a view; kv/KvCache owns the memory).
struct KvLayerView {
  Tensor k;          // [n_blocks, block_size, n_kv_heads, head_dim] f32
  Tensor v;          // [n_blocks, block_size, n_kv_heads, head_dim] f32
  Tensor positions;  // [n_blocks, block_size] i32, RoPE position held in each slot (shared by layers)
  int64_t block_size = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

struct AttentionBatch {
  // Per token (n_tokens entries each).
  std::span<const int32_t> token_seq;   // index into the per-sequence arrays
  std::span<const int32_t> token_slot;  // logical KV slot within its sequence (0-based)
  std::span<const int32_t> token_pos;   // RoPE position (explicit; not derived from the slot)
  // Per sequence.
  std::vector<std::span<const int32_t>> block_tables;  // logical block -> physical block id
  std::span<const int32_t> seq_n_slots;                // filled slots after this step's writes
};

struct AttentionParams {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;           // 1 / sqrt(head_dim)
  int64_t sliding_window = 0;   // 0 = none; else key visible iff q_pos - window < k_pos <= q_pos
};

}  // namespace specstack

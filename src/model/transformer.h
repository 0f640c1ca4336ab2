// Transformer: the decoder-only forward pass shared by every supported
// architecture (llama, qwen2, qwen3, mistral, qwen3_moe). What differs between
// them is data, not code paths: biases, q/k norms, a sliding window and routed
// experts are present in the weights/config or not.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/weights.h"

namespace specstack {

struct ForwardBatch {
  std::span<const int32_t> token_ids;   // [n_tokens]
  AttentionBatch attention;             // positions, slots, sequences, block tables
  std::span<const int32_t> logit_rows;  // ascending token indices whose logits are wanted
  // Ascending token indices whose queries (post q_norm, post-RoPE: exactly what
  // attention sees) are copied out for every layer into *captured_queries
  // [capture_rows.size(), n_layers, n_heads * head_dim] (resized by forward).
  std::span<const int32_t> capture_rows;
  Tensor* captured_queries = nullptr;
};

class Transformer {
 public:
  Transformer(ModelConfig config, ModelWeights weights, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  KvCacheShape kv_shape(int64_t n_blocks, int64_t block_size) const;

  // Runs every token of the batch through the model, writing K/V into `kv`,
  // and fills logits [logit_rows.size(), vocab] (f32, resized by the call).
  void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits);

 private:
  void attention_block(int64_t layer, const ForwardBatch& batch, KvCache& kv);
  void dense_mlp(const LayerWeights& layer);
  void moe_mlp(const LayerWeights& layer);
  // A workspace tensor [rows, cols] f32, reused across calls when it fits.
  Tensor& scratch(size_t index, int64_t rows, int64_t cols);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  std::vector<Tensor> scratch_storage_;  // capacity buffers
  std::vector<Tensor> scratch_views_;    // shaped views into them

  // Per-call state: the residual stream and the normed input of a block.
  Tensor x_;  // [n_tokens, hidden]
  Tensor h_;  // [n_tokens, hidden]
};

}  // namespace specstack

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
#include "model/forward_model.h"
#include "model/weights.h"

namespace specstack {


class Transformer final : public ForwardModel {
 public:
  Transformer(ModelConfig config, ModelWeights weights, Backend& backend);

  Device device() const override { return Device::kCpu; }
  const ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override { return weights_.weight_bytes; }
  const Tensor& rope_inv_freq() const override { return weights_.rope_inv_freq; }
  const ModelWeights& weights() const { return weights_; }

  // Runs every token of the batch through the model, writing K/V into `kv`,
  // and fills logits [logit_rows.size(), vocab] (f32, resized by the call).
  void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) override;

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

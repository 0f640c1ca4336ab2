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
#include "parallel/communicator.h"

namespace specstack {

// A tensor-parallel rank's place in its group (parallel/shard_plan.h says how
// the weights are split). With comm == nullptr the Transformer is the whole
// model and makes no collective call. With a communicator, config and weights
// are the rank's shard and the forward pass all-reduces the embedding rows
// (vocab-parallel lookup), the o_proj and MLP/MoE outputs (partial sums), and
// all-gathers the logit columns, so every rank returns the full logits.
struct TransformerShard {
  Communicator* comm = nullptr;
  int64_t vocab_begin = 0;  // first global vocab row of the rank's config.vocab_size rows
  int64_t vocab_chunk = 0;  // vocab rows per rank in the logit all-gather (padded)
  int64_t full_vocab = 0;   // the model's vocabulary: the width of the logits returned
};

class Transformer final : public ForwardModel {
 public:
  Transformer(ModelConfig config, ModelWeights weights, Backend& backend,
              TransformerShard shard = {});

  Device device() const override { return Device::kCpu; }
  const ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override { return weights_.weight_bytes; }
  const Tensor& rope_inv_freq() const override { return weights_.rope_inv_freq; }
  const ModelWeights& weights() const { return weights_; }

  // Runs every token of the batch through the model, writing K/V into `kv`,
  // and fills logits [logit_rows.size(), vocab] (f32, resized by the call).
  void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) override;
  // Forwards whose last layer ran for the logit rows alone (tests).
  int64_t tail_steps() const { return tail_steps_; }

 private:
  // tail: K/V for every row, then attention and o for batch.logit_rows alone,
  // after which x_ and h_ hold those rows only (forward's last layer).
  void attention_block(int64_t layer, const ForwardBatch& batch, KvCache& kv, bool tail);
  // x_ = embedding rows of the batch (vocab-parallel under a communicator).
  void embed(std::span<const int32_t> token_ids);
  // logits = lm_head · rows (each rank its vocab slice, then all-gathered).
  void lm_head(const Tensor& rows, Tensor& logits);
  // Sums a rank's partial output over the group (nothing without one).
  void all_reduce(Tensor& partial);
  void dense_mlp(const LayerWeights& layer);
  void moe_mlp(const LayerWeights& layer);
  // A workspace tensor [rows, cols] f32, reused across calls when it fits.
  Tensor& scratch(size_t index, int64_t rows, int64_t cols);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  TransformerShard shard_;
  std::vector<Tensor> scratch_storage_;  // capacity buffers
  std::vector<Tensor> scratch_views_;    // shaped views into them

  // Per-call state: the residual stream and the normed input of a block.
  bool tail_rows_only_ = true;  // SPECSTACK_LAST_LAYER_ALL_ROWS unset
  int64_t tail_steps_ = 0;
  Tensor x_;  // [n_tokens, hidden]
  Tensor h_;  // [n_tokens, hidden]
};

}  // namespace specstack

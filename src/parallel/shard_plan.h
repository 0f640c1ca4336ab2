// ShardPlan: how a model splits over N tensor-parallel ranks (Megatron-style),
// decided once from the ModelConfig. The rules, per tensor (HF names):
//  * q_proj / k_proj / v_proj (weight and bias): rows (output columns of the
//    linear), by whole heads. Rank r takes q heads [r*H/N, (r+1)*H/N). KV heads
//    split the same way when N divides n_kv_heads; when n_kv_heads < N (N a
//    multiple of it) each rank takes the one KV head its q heads use, so KV
//    heads are replicated N / n_kv_heads times.
//  * o_proj, down_proj: columns (input rows of the linear); each rank's output
//    is a partial sum, all-reduced. o_proj's bias is kept on rank 0 only, so it
//    is added once (TensorParallelModel drops it from the other ranks).
//  * gate_proj / up_proj (dense and every expert): rows, intermediate / N each.
//  * embed_tokens, lm_head: rows (vocab-parallel), ceil(vocab / N) per rank,
//    the last rank taking what is left.
//  * norms (incl. per-head q_norm / k_norm) and the MoE router: replicated.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/config.h"

namespace specstack {

// The slice of one full tensor a rank holds: elements [begin, begin + count)
// of `axis` out of `full` (axis -1: the whole tensor, replicated).
struct TensorShard {
  int axis = -1;
  int64_t begin = 0;
  int64_t count = 0;
  int64_t full = 0;
};

// What one rank holds, in heads, widths and vocab rows.
struct RankShape {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t kv_head_begin = 0;        // first global KV head of the rank
  int64_t intermediate = 0;         // dense MLP width
  int64_t expert_intermediate = 0;  // each expert's width (MoE)
  int64_t vocab_begin = 0;
  int64_t vocab_count = 0;
};

class ShardPlan {
 public:
  // Errors (one line) when the model cannot be split N ways: N < 1, N does not
  // divide the attention heads, n_kv_heads and N do not divide one another,
  // N does not divide the (expert) intermediate size, fewer vocab rows than N.
  static Result<ShardPlan> make(const ModelConfig& config, int64_t n_ranks);

  int64_t n_ranks() const { return n_ranks_; }
  const ModelConfig& full_config() const { return config_; }
  // Vocab rows per rank as padded for the logit all-gather (every rank sends
  // [rows, vocab_chunk]; the last rank's unused columns are zero).
  int64_t vocab_chunk() const { return vocab_chunk_; }
  // True when a KV head is held by more than one rank (n_kv_heads < N).
  bool kv_replicated() const { return config_.n_kv_heads < n_ranks_; }

  RankShape rank_shape(int64_t rank) const;
  // The config a rank's Transformer runs: its heads, widths and vocab rows.
  ModelConfig rank_config(int64_t rank) const;
  // Which part of the full tensor `name` rank `rank` holds.
  TensorShard tensor_shard(const std::string& name, int64_t rank) const;

 private:
  ShardPlan(ModelConfig config, int64_t n_ranks, int64_t vocab_chunk)
      : config_(std::move(config)), n_ranks_(n_ranks), vocab_chunk_(vocab_chunk) {}
  ModelConfig config_;
  int64_t n_ranks_;
  int64_t vocab_chunk_;
};

}  // namespace specstack

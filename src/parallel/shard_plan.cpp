#include "parallel/shard_plan.h"

#include <algorithm>
#include <string_view>

#include "base/check.h"

namespace specstack {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool has_dense_layer(const ModelConfig& config) {
  for (int64_t l = 0; l < config.n_layers; ++l) {
    if (!config.layer_is_moe(l)) return true;
  }
  return false;
}

}  // namespace

Result<ShardPlan> ShardPlan::make(const ModelConfig& config, int64_t n) {
  if (n < 1) return errorf("--tensor-parallel-size must be at least 1, got {}", n);
  if (config.n_heads % n != 0) {
    return errorf("--tensor-parallel-size {}: it does not divide the {} attention heads", n,
                  config.n_heads);
  }
  if (config.n_kv_heads % n != 0 && n % config.n_kv_heads != 0) {
    return errorf(
        "--tensor-parallel-size {}: the {} KV heads can neither be split {} ways nor replicated "
        "evenly (one of the two must divide the other)",
        n, config.n_kv_heads, n);
  }
  if (has_dense_layer(config) && config.intermediate_size % n != 0) {
    return errorf("--tensor-parallel-size {}: it does not divide the MLP intermediate size {}", n,
                  config.intermediate_size);
  }
  if (config.moe.n_experts > 0 && config.moe.expert_intermediate_size % n != 0) {
    return errorf("--tensor-parallel-size {}: it does not divide the expert intermediate size {}",
                  n, config.moe.expert_intermediate_size);
  }
  const int64_t chunk = (config.vocab_size + n - 1) / n;
  if (chunk * (n - 1) >= config.vocab_size) {
    return errorf("--tensor-parallel-size {}: the vocabulary of {} rows leaves a rank with none", n,
                  config.vocab_size);
  }
  return ShardPlan(config, n, chunk);
}

RankShape ShardPlan::rank_shape(int64_t rank) const {
  SS_CHECK_LE(0, rank);
  SS_CHECK_LT(rank, n_ranks_);
  RankShape s;
  s.n_heads = config_.n_heads / n_ranks_;
  if (config_.n_kv_heads % n_ranks_ == 0) {
    s.n_kv_heads = config_.n_kv_heads / n_ranks_;
    s.kv_head_begin = rank * s.n_kv_heads;
  } else {  // replicated: the KV head shared by this rank's q heads
    s.n_kv_heads = 1;
    s.kv_head_begin = rank / (n_ranks_ / config_.n_kv_heads);
  }
  s.intermediate = config_.intermediate_size / n_ranks_;
  s.expert_intermediate = config_.moe.expert_intermediate_size / n_ranks_;
  s.vocab_begin = rank * vocab_chunk_;
  s.vocab_count = std::min(vocab_chunk_, config_.vocab_size - s.vocab_begin);
  return s;
}

ModelConfig ShardPlan::rank_config(int64_t rank) const {
  const RankShape s = rank_shape(rank);
  ModelConfig c = config_;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.intermediate_size = s.intermediate;
  c.moe.expert_intermediate_size = s.expert_intermediate;
  c.vocab_size = s.vocab_count;
  return c;
}

TensorShard ShardPlan::tensor_shard(const std::string& name, int64_t rank) const {
  const RankShape s = rank_shape(rank);
  const int64_t hd = config_.head_dim;
  auto part = [](int axis, int64_t begin, int64_t count, int64_t full) {
    return TensorShard{axis, begin, count, full};
  };
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    return part(0, s.vocab_begin, s.vocab_count, config_.vocab_size);
  }
  if (ends_with(name, ".self_attn.q_proj.weight") || ends_with(name, ".self_attn.q_proj.bias")) {
    return part(0, rank * s.n_heads * hd, s.n_heads * hd, config_.n_heads * hd);
  }
  for (const char* kv : {".self_attn.k_proj.weight", ".self_attn.k_proj.bias",
                         ".self_attn.v_proj.weight", ".self_attn.v_proj.bias"}) {
    if (ends_with(name, kv)) {
      return part(0, s.kv_head_begin * hd, s.n_kv_heads * hd, config_.n_kv_heads * hd);
    }
  }
  if (ends_with(name, ".self_attn.o_proj.weight")) {
    return part(1, rank * s.n_heads * hd, s.n_heads * hd, config_.n_heads * hd);
  }
  const bool expert = name.find(".mlp.experts.") != std::string::npos;
  const int64_t width = expert ? s.expert_intermediate : s.intermediate;
  const int64_t full = expert ? config_.moe.expert_intermediate_size : config_.intermediate_size;
  if (ends_with(name, ".gate_proj.weight") || ends_with(name, ".up_proj.weight")) {
    return part(0, rank * width, width, full);
  }
  if (ends_with(name, ".down_proj.weight")) return part(1, rank * width, width, full);
  return TensorShard{};  // norms, q/k norms, the router, o_proj's bias: replicated
}

}  // namespace specstack

#include "model/gguf_config.h"

#include "gguf/gguf_dequant.h"

namespace specstack {
namespace {

struct GgufArch {
  const char* name;  // general.architecture
  Architecture arch;
  const char* model_type;  // the HF model_type it corresponds to
};

constexpr GgufArch kArchs[] = {
    {"llama", Architecture::kArchitectureLlama, "llama"},
    {"qwen2", Architecture::kArchitectureQwen2, "qwen2"},
    {"qwen3", Architecture::kArchitectureQwen3, "qwen3"},
    {"qwen3moe", Architecture::kArchitectureQwen3Moe, "qwen3_moe"},
};

// A positive integer key, e.g. llama.block_count.
Result<int64_t> positive(const gguf::Header& h, const std::string& key) {
  SS_ASSIGN_OR_RETURN(int64_t v, h.get_int(key));
  if (v <= 0) return errorf("gguf: metadata key '{}' must be positive, got {}", key, v);
  return v;
}

Result<int64_t> optional_positive(const gguf::Header& h, const std::string& key, int64_t fallback) {
  return h.has(key) ? positive(h, key) : Result<int64_t>(fallback);
}

Status read_rope(const gguf::GgufFile& file, const std::string& a, ModelConfig& c) {
  const gguf::Header& h = file.header();
  if (h.has(a + ".rope.freq_base")) {
    SS_ASSIGN_OR_RETURN(c.rope.theta, h.get_float(a + ".rope.freq_base"));
  }
  if (h.has(a + ".rope.scaling.type")) {
    SS_ASSIGN_OR_RETURN(std::string type, h.get_string(a + ".rope.scaling.type"));
    if (type != "none") {
      return errorf(
          "gguf: {}.rope.scaling.type '{}' is not supported (llama3 scaling comes as "
          "rope_freqs.weight)",
          a, type);
    }
  }
  if (h.has(a + ".rope.dimension_count")) {
    SS_ASSIGN_OR_RETURN(int64_t dims, h.get_int(a + ".rope.dimension_count"));
    if (dims != c.head_dim) {
      return errorf(
          "gguf: {}.rope.dimension_count {} != head dim {} (partial RoPE is not "
          "supported)",
          a, dims, c.head_dim);
    }
  }
  // convert_hf_to_gguf writes llama3 rope scaling as per-frequency divisors.
  if (const gguf::TensorInfo* factors = h.find_tensor("rope_freqs.weight")) {
    if (factors->numel() != c.head_dim / 2) {
      return errorf("gguf: rope_freqs.weight has {} values, expected head_dim/2 = {}",
                    factors->numel(), c.head_dim / 2);
    }
    SS_ASSIGN_OR_RETURN(Tensor t, gguf::dequantize_tensor(file, *factors));
    c.rope.freq_factors.assign(t.f32(), t.f32() + t.numel());
  }
  return {};
}

}  // namespace

Result<ModelConfig> model_config_from_gguf(const gguf::GgufFile& file) {
  const gguf::Header& h = file.header();
  SS_ASSIGN_OR_RETURN(std::string a, h.get_string("general.architecture"));
  const GgufArch* arch = nullptr;
  for (const GgufArch& candidate : kArchs) {
    if (a == candidate.name) arch = &candidate;
  }
  if (!arch) {
    return errorf("gguf: unsupported architecture '{}' (supported: llama, qwen2, qwen3, qwen3moe)",
                  a);
  }
  ModelConfig c;
  c.arch = arch->arch;
  c.model_type = arch->model_type;
  SS_ASSIGN_OR_RETURN(c.n_layers, positive(h, a + ".block_count"));
  SS_ASSIGN_OR_RETURN(c.hidden_size, positive(h, a + ".embedding_length"));
  SS_ASSIGN_OR_RETURN(c.n_heads, positive(h, a + ".attention.head_count"));
  if (const gguf::Value* kv = h.find(a + ".attention.head_count_kv");
      kv && kv->type == gguf::ValueType::kArray) {
    return errorf("gguf: per-layer {}.attention.head_count_kv is not supported", a);
  }
  SS_ASSIGN_OR_RETURN(c.n_kv_heads,
                      optional_positive(h, a + ".attention.head_count_kv", c.n_heads));
  SS_ASSIGN_OR_RETURN(c.head_dim,
                      optional_positive(h, a + ".attention.key_length", c.hidden_size / c.n_heads));
  SS_ASSIGN_OR_RETURN(int64_t v_dim,
                      optional_positive(h, a + ".attention.value_length", c.head_dim));
  if (v_dim != c.head_dim) {
    return errorf("gguf: attention.value_length {} != key_length {} is not supported", v_dim,
                  c.head_dim);
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return errorf("gguf: {} heads are not a multiple of {} kv heads", c.n_heads, c.n_kv_heads);
  }
  SS_ASSIGN_OR_RETURN(c.max_position_embeddings, positive(h, a + ".context_length"));
  SS_ASSIGN_OR_RETURN(c.rms_norm_eps, h.get_float(a + ".attention.layer_norm_rms_epsilon"));
  SS_TRY(read_rope(file, a, c));

  const gguf::TensorInfo* embed = h.find_tensor("token_embd.weight");
  if (!embed) return make_error("gguf: missing tensor 'token_embd.weight'");
  if (embed->dims.size() != 2 || embed->dims[0] != c.hidden_size) {
    return errorf("gguf: token_embd.weight is not [vocab, {}]", c.hidden_size);
  }
  c.vocab_size = embed->dims[1];
  if (h.has(a + ".vocab_size")) {
    SS_ASSIGN_OR_RETURN(int64_t vocab, h.get_int(a + ".vocab_size"));
    if (vocab != c.vocab_size) {
      return errorf("gguf: {}.vocab_size {} != token_embd.weight rows {}", a, vocab, c.vocab_size);
    }
  }
  c.tie_word_embeddings = h.find_tensor("output.weight") == nullptr;
  // qwen2 always has q/k/v biases; a llama file has them when it stores them.
  c.attention_bias =
      c.arch == Architecture::kArchitectureQwen2 || h.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (c.attention_bias && c.arch == Architecture::kArchitectureLlama &&
      !h.find_tensor("blk.0.attn_output.bias")) {
    return make_error("gguf: llama file with q/k/v biases but no attn_output.bias");
  }
  c.qk_norm =
      c.arch == Architecture::kArchitectureQwen3 || c.arch == Architecture::kArchitectureQwen3Moe;
  if (h.has(a + ".attention.sliding_window")) {
    SS_ASSIGN_OR_RETURN(c.sliding_window, h.get_int(a + ".attention.sliding_window"));
    if (c.sliding_window < 0) return errorf("gguf: negative {}.attention.sliding_window", a);
    if (c.sliding_window > 0 && c.arch != Architecture::kArchitectureLlama) {
      return errorf("gguf: a sliding window is only supported on llama (mistral) files");
    }
    // The engine's mistral architecture is llama with a window on every layer.
    if (c.sliding_window > 0) c.arch = Architecture::kArchitectureMistral;
  }
  if (c.arch == Architecture::kArchitectureQwen3Moe) {
    SS_ASSIGN_OR_RETURN(c.moe.n_experts, positive(h, a + ".expert_count"));
    SS_ASSIGN_OR_RETURN(c.moe.n_experts_per_token, positive(h, a + ".expert_used_count"));
    SS_ASSIGN_OR_RETURN(c.moe.expert_intermediate_size,
                        positive(h, a + ".expert_feed_forward_length"));
    // llama.cpp always renormalizes qwen3moe's top-k weights.
    c.moe.norm_topk_prob = true;
    if (h.has(a + ".expert_weights_norm")) {
      SS_ASSIGN_OR_RETURN(c.moe.norm_topk_prob, h.get_bool(a + ".expert_weights_norm"));
    }
    c.moe.decoder_sparse_step = 1;
    c.intermediate_size = 0;
    if (h.has(a + ".feed_forward_length")) {
      SS_ASSIGN_OR_RETURN(c.intermediate_size, h.get_int(a + ".feed_forward_length"));
    }
  } else {
    if (h.has(a + ".expert_count")) {
      SS_ASSIGN_OR_RETURN(int64_t experts, h.get_int(a + ".expert_count"));
      if (experts > 0) return errorf("gguf: mixture-of-experts {} files are not supported", a);
    }
    SS_ASSIGN_OR_RETURN(c.intermediate_size, positive(h, a + ".feed_forward_length"));
  }
  if (h.has("tokenizer.ggml.bos_token_id")) {
    SS_ASSIGN_OR_RETURN(int64_t bos, h.get_int("tokenizer.ggml.bos_token_id"));
    c.bos_token_id = static_cast<int32_t>(bos);
  }
  if (h.has("tokenizer.ggml.eos_token_id")) {
    SS_ASSIGN_OR_RETURN(int64_t eos, h.get_int("tokenizer.ggml.eos_token_id"));
    c.eos_token_ids.push_back(static_cast<int32_t>(eos));
  }
  if (h.has("tokenizer.ggml.eot_token_id")) {
    SS_ASSIGN_OR_RETURN(int64_t eot, h.get_int("tokenizer.ggml.eot_token_id"));
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != eot) {
      c.eos_token_ids.push_back(static_cast<int32_t>(eot));
    }
  }
  c.weight_dtype = DType::kF32;  // what the loader hands the backend (see gguf_weights.h)
  return c;
}

}  // namespace specstack

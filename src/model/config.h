// ModelConfig: the parts of a HuggingFace config.json the engine honours.
// Parsing is strict about what changes the math: an unsupported model_type,
// rope type, activation or option is an error naming the field, never a
// silently different model.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace specstack {

enum class Architecture : uint8_t {
  kArchitectureLlama,     // model_type "llama"
  kArchitectureQwen2,     // "qwen2": q/k/v bias
  kArchitectureQwen3,     // "qwen3": q_norm/k_norm, explicit head_dim
  kArchitectureMistral,   // "mistral": sliding_window (by position distance)
  kArchitectureQwen3Moe,  // "qwen3_moe": top-k softmax routed experts
};

const char* architecture_name(Architecture arch);

enum class RopeType : uint8_t { kRopeDefault, kRopeLlama3 };

struct RopeConfig {
  RopeType type = RopeType::kRopeDefault;
  double theta = 10000.0;
  // llama3 scaling (rope_scaling / rope_parameters with rope_type "llama3").
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
  // Per-frequency divisors [head_dim / 2] applied after the above, as GGUF
  // files store llama3 scaling (the rope_freqs.weight tensor); empty = none.
  std::vector<float> freq_factors;
};

struct MoeConfig {
  int64_t n_experts = 0;              // num_experts / num_local_experts; 0 = dense model
  int64_t n_experts_per_token = 0;    // num_experts_per_tok
  int64_t expert_intermediate_size = 0;  // moe_intermediate_size
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;    // layer l is MoE iff (l+1) % step == 0 and l not in mlp_only_layers
  std::vector<int64_t> mlp_only_layers;
};

struct ModelConfig {
  Architecture arch = Architecture::kArchitectureLlama;
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // dense MLP width (also for mlp_only_layers of a MoE)
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;   // defaults to n_heads
  int64_t head_dim = 0;     // defaults to hidden_size / n_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q/k/v (qwen2 always; llama attention_bias)
  bool qk_norm = false;         // qwen3 / qwen3_moe
  int64_t sliding_window = 0;   // 0 = full attention on every layer
  MoeConfig moe;
  int32_t bos_token_id = -1;    // -1 = none
  std::vector<int32_t> eos_token_ids;
  DType weight_dtype = DType::kF32;  // torch_dtype / dtype; what --dummy-weights uses
  // quant_method of an FP8 checkpoint ("compressed-tensors", "fbgemm_fp8"),
  // empty for plain ones: its e4m3 matrices are dequantized at load.
  std::string stored_quantization;

  // True when layer `layer` uses the sliding window (mistral: every layer).
  bool layer_is_sliding(int64_t layer) const { return sliding_window > 0; }
  // True when layer `layer` has a routed-expert MLP.
  bool layer_is_moe(int64_t layer) const;
};

// Parses config.json text. Errors name the offending field.
Result<ModelConfig> parse_model_config(std::string_view json_text);
// Reads and parses <dir>/config.json (or a path to a .json file), or the
// metadata of a GGUF file (model/gguf_config.h).
Result<ModelConfig> load_model_config(const std::string& path);

}  // namespace specstack

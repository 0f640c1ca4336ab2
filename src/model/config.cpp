// HF config.json -> ModelConfig. Defaults follow the transformers config
// classes (LlamaConfig, Qwen2Config, Qwen3Config, MistralConfig,
// Qwen3MoeConfig) so that a config the engine accepts means the same model it
// means to HF; anything that would change the math and is not implemented is
// an error naming the field.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/check.h"
#include "base/mapped_file.h"
#include "gguf/gguf_file.h"
#include "model/gguf_config.h"
#include "model/stored_quantization.h"

namespace specstack {

namespace {

using nlohmann::json;

// Bound on every size field: large enough for any real model, small enough
// that products of two sizes (weight shapes) cannot overflow int64.
constexpr int64_t kMaxDimension = int64_t{1} << 24;

// User-supplied text echoed in a message: printable ASCII only, bounded, so
// an error line stays one readable line whatever the input was.
std::string printable(std::string_view text, size_t max_len = 64) {
  std::string out;
  for (char c : text.substr(0, max_len)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > max_len) out += "...";
  return out;
}

// Typed access to the fields of one JSON object. `where` prefixes every
// message ("config.json" or "config.json: rope_scaling").
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  const std::string& where() const { return where_; }

  bool has(const char* name) const { return object_.contains(name); }

  // The field, or nullptr when absent or null (HF treats both as "use the default").
  const json* find(const char* name) const {
    auto it = object_.find(name);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Error type_error(const char* name, const char* expected, const json& value) const {
    return errorf("{}: '{}' must be {}, got {}", where_, name, expected, value.type_name());
  }

  Result<std::optional<int64_t>> optional_int(const char* name) const {
    const json* value = find(name);
    if (value == nullptr) return std::optional<int64_t>();
    if (value->is_number_unsigned()) {
      if (value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return errorf("{}: '{}' is out of range", where_, name);
      }
      return std::optional<int64_t>(static_cast<int64_t>(value->get<uint64_t>()));
    }
    if (value->is_number_integer()) return std::optional<int64_t>(value->get<int64_t>());
    return type_error(name, "an integer", *value);
  }

  Result<int64_t> required_int(const char* name) const {
    SS_ASSIGN_OR_RETURN(std::optional<int64_t> value, optional_int(name));
    if (!value) return errorf("{}: missing required field '{}' (an integer)", where_, name);
    return *value;
  }

  // A size: an integer in [1, kMaxDimension].
  Result<int64_t> check_size(const char* name, int64_t value) const {
    if (value <= 0) return errorf("{}: '{}' must be positive, got {}", where_, name, value);
    if (value > kMaxDimension) {
      return errorf("{}: '{}' = {} is implausibly large (max {})", where_, name, value,
                    kMaxDimension);
    }
    return value;
  }

  Result<int64_t> required_size(const char* name) const {
    SS_ASSIGN_OR_RETURN(int64_t value, required_int(name));
    return check_size(name, value);
  }

  Result<int64_t> optional_size(const char* name, int64_t fallback) const {
    SS_ASSIGN_OR_RETURN(std::optional<int64_t> value, optional_int(name));
    if (!value) return fallback;
    return check_size(name, *value);
  }

  Result<std::optional<double>> optional_number(const char* name) const {
    const json* value = find(name);
    if (value == nullptr) return std::optional<double>();
    if (!value->is_number()) return type_error(name, "a number", *value);
    return std::optional<double>(value->get<double>());
  }

  // A finite number > 0 (rope theta, eps, scaling factors).
  Result<double> positive_number(const char* name, std::optional<double> fallback) const {
    SS_ASSIGN_OR_RETURN(std::optional<double> value, optional_number(name));
    if (!value) {
      if (!fallback) return errorf("{}: missing required field '{}' (a number)", where_, name);
      return *fallback;
    }
    if (!std::isfinite(*value) || *value <= 0) {
      return errorf("{}: '{}' must be a positive number, got {}", where_, name, *value);
    }
    return *value;
  }

  Result<bool> optional_bool(const char* name, bool fallback) const {
    const json* value = find(name);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) return type_error(name, "a boolean", *value);
    return value->get<bool>();
  }

  Result<std::optional<std::string>> optional_string(const char* name) const {
    const json* value = find(name);
    if (value == nullptr) return std::optional<std::string>();
    if (!value->is_string()) return type_error(name, "a string", *value);
    return std::optional<std::string>(value->get<std::string>());
  }

  // A token id: an integer in [0, INT32_MAX].
  Result<int32_t> token_id(const char* name, const json& value) const {
    if (!value.is_number_integer()) return type_error(name, "an integer token id", value);
    if (value.is_number_unsigned()
            ? value.get<uint64_t>() > INT32_MAX
            : (value.get<int64_t>() < 0 || value.get<int64_t>() > INT32_MAX)) {
      return errorf("{}: '{}' is not a valid token id", where_, name);
    }
    return static_cast<int32_t>(value.get<int64_t>());
  }

 private:
  const json& object_;
  std::string where_;
};

struct ArchInfo {
  const char* model_type;
  Architecture arch;
  int64_t default_max_positions;  // the HF config class default
};

constexpr ArchInfo kArchitectures[] = {
    {"llama", Architecture::kArchitectureLlama, 2048},
    {"qwen2", Architecture::kArchitectureQwen2, 32768},
    {"qwen3", Architecture::kArchitectureQwen3, 32768},
    {"mistral", Architecture::kArchitectureMistral, 4096 * 32},
    {"qwen3_moe", Architecture::kArchitectureQwen3Moe, 32768},
};

Result<ArchInfo> parse_architecture(const Fields& fields) {
  const json* value = fields.find("model_type");
  if (value == nullptr) return errorf("{}: missing required field 'model_type'", fields.where());
  if (!value->is_string()) return fields.type_error("model_type", "a string", *value);
  const std::string& name = value->get_ref<const std::string&>();
  for (const ArchInfo& info : kArchitectures) {
    if (name == info.model_type) return info;
  }
  return errorf(
      "{}: unsupported model_type '{}' (supported: llama, qwen2, qwen3, mistral, qwen3_moe)",
      fields.where(), printable(name));
}

// RoPE: theta from rope_theta or rope_parameters.rope_theta; the scaling from
// rope_scaling (Hub configs) or rope_parameters (transformers 5).
Result<RopeConfig> parse_rope(const Fields& fields) {
  RopeConfig rope;
  const json* scaling = fields.find("rope_scaling");
  const json* parameters = fields.find("rope_parameters");
  if (scaling != nullptr && !scaling->is_object()) {
    return fields.type_error("rope_scaling", "an object or null", *scaling);
  }
  if (parameters != nullptr && !parameters->is_object()) {
    return fields.type_error("rope_parameters", "an object or null", *parameters);
  }
  std::optional<double> theta_fallback = 10000.0;
  if (parameters != nullptr) {
    Fields params(*parameters, fields.where() + ": rope_parameters");
    SS_ASSIGN_OR_RETURN(theta_fallback, params.positive_number("rope_theta", 10000.0));
  }
  SS_ASSIGN_OR_RETURN(rope.theta, fields.positive_number("rope_theta", theta_fallback));

  const char* source = scaling != nullptr ? "rope_scaling" : "rope_parameters";
  const json* spec = scaling != nullptr ? scaling : parameters;
  if (spec == nullptr) return rope;
  Fields spec_fields(*spec, fields.where() + ": " + source);
  // "type" is the pre-4.45 spelling of "rope_type".
  SS_ASSIGN_OR_RETURN(std::optional<std::string> type, spec_fields.optional_string("rope_type"));
  if (!type) {
    SS_ASSIGN_OR_RETURN(type, spec_fields.optional_string("type"));
  }
  if (!type || *type == "default") return rope;
  if (*type != "llama3") {
    return errorf("{}: unsupported {} type '{}' (supported: default, llama3)", fields.where(),
                  source, printable(*type));
  }
  rope.type = RopeType::kRopeLlama3;
  SS_ASSIGN_OR_RETURN(rope.factor, spec_fields.positive_number("factor", std::nullopt));
  SS_ASSIGN_OR_RETURN(rope.low_freq_factor,
                      spec_fields.positive_number("low_freq_factor", std::nullopt));
  SS_ASSIGN_OR_RETURN(rope.high_freq_factor,
                      spec_fields.positive_number("high_freq_factor", std::nullopt));
  // The llama3 blend divides by (high - low).
  if (rope.high_freq_factor <= rope.low_freq_factor) {
    return errorf("{}: 'high_freq_factor' ({}) must be greater than 'low_freq_factor' ({})",
                  spec_fields.where(), rope.high_freq_factor, rope.low_freq_factor);
  }
  SS_ASSIGN_OR_RETURN(rope.original_max_position_embeddings,
                      spec_fields.required_size("original_max_position_embeddings"));
  return rope;
}

Result<int64_t> parse_sliding_window(const Fields& fields, Architecture arch) {
  switch (arch) {
    case Architecture::kArchitectureLlama:
      return int64_t{0};
    case Architecture::kArchitectureMistral: {
      // Absent means MistralConfig's default (4096); an explicit null means
      // full attention.
      if (!fields.has("sliding_window")) return int64_t{4096};
      SS_ASSIGN_OR_RETURN(std::optional<int64_t> window, fields.optional_int("sliding_window"));
      if (!window) return int64_t{0};
      return fields.check_size("sliding_window", *window);
    }
    case Architecture::kArchitectureQwen2:
    case Architecture::kArchitectureQwen3:
    case Architecture::kArchitectureQwen3Moe: {
      // sliding_window only takes effect with use_sliding_window (and then only
      // for layers >= max_window_layers), which the engine does not implement.
      SS_ASSIGN_OR_RETURN(bool use, fields.optional_bool("use_sliding_window", false));
      if (use) {
        return errorf("{}: 'use_sliding_window' = true is not supported", fields.where());
      }
      return int64_t{0};
    }
  }
  return int64_t{0};
}

Result<MoeConfig> parse_moe(const Fields& fields, int64_t n_layers) {
  MoeConfig moe;
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> n_experts, fields.optional_int("num_experts"));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> n_local, fields.optional_int("num_local_experts"));
  if (n_experts && n_local && *n_experts != *n_local) {
    return errorf("{}: 'num_experts' ({}) and 'num_local_experts' ({}) disagree", fields.where(),
                  *n_experts, *n_local);
  }
  if (!n_experts && !n_local) {
    return errorf("{}: missing required field 'num_experts' (an integer)", fields.where());
  }
  SS_ASSIGN_OR_RETURN(moe.n_experts,
                      fields.check_size(n_experts ? "num_experts" : "num_local_experts",
                                        n_experts ? *n_experts : *n_local));
  SS_ASSIGN_OR_RETURN(moe.n_experts_per_token, fields.required_size("num_experts_per_tok"));
  if (moe.n_experts_per_token > moe.n_experts) {
    return errorf("{}: 'num_experts_per_tok' ({}) exceeds 'num_experts' ({})", fields.where(),
                  moe.n_experts_per_token, moe.n_experts);
  }
  SS_ASSIGN_OR_RETURN(moe.expert_intermediate_size, fields.required_size("moe_intermediate_size"));
  SS_ASSIGN_OR_RETURN(moe.norm_topk_prob, fields.optional_bool("norm_topk_prob", false));
  SS_ASSIGN_OR_RETURN(moe.decoder_sparse_step, fields.optional_size("decoder_sparse_step", 1));
  if (const json* layers = fields.find("mlp_only_layers")) {
    if (!layers->is_array()) return fields.type_error("mlp_only_layers", "an array", *layers);
    for (const json& layer : *layers) {
      bool in_range = layer.is_number_unsigned()
                          ? layer.get<uint64_t>() < static_cast<uint64_t>(n_layers)
                          : layer.is_number_integer() && layer.get<int64_t>() >= 0 &&
                                layer.get<int64_t>() < n_layers;
      if (!in_range) {
        return errorf("{}: 'mlp_only_layers' entries must be layer indices in [0, {})",
                      fields.where(), n_layers);
      }
      moe.mlp_only_layers.push_back(layer.get<int64_t>());
    }
  }
  return moe;
}

Result<DType> parse_dtype(const Fields& fields) {
  // transformers 5 writes "dtype", older versions "torch_dtype".
  const char* name = fields.find("dtype") != nullptr ? "dtype" : "torch_dtype";
  SS_ASSIGN_OR_RETURN(std::optional<std::string> value, fields.optional_string(name));
  if (!value || *value == "bfloat16") return DType::kBF16;
  if (*value == "float32") return DType::kF32;
  if (*value == "float16") return DType::kF16;
  return errorf("{}: '{}' = '{}' is not supported (float32, bfloat16, float16)", fields.where(),
                name, printable(*value));
}

Status parse_special_tokens(const Fields& fields, ModelConfig& config) {
  if (const json* bos = fields.find("bos_token_id")) {
    SS_ASSIGN_OR_RETURN(config.bos_token_id, fields.token_id("bos_token_id", *bos));
  }
  const json* eos = fields.find("eos_token_id");
  if (eos == nullptr) return Status::ok_status();
  if (!eos->is_array()) {
    SS_ASSIGN_OR_RETURN(int32_t id, fields.token_id("eos_token_id", *eos));
    config.eos_token_ids.push_back(id);
    return Status::ok_status();
  }
  for (const json& item : *eos) {
    SS_ASSIGN_OR_RETURN(int32_t id, fields.token_id("eos_token_id", item));
    config.eos_token_ids.push_back(id);
  }
  return Status::ok_status();
}

Status parse_attention_shape(const Fields& fields, Architecture arch, ModelConfig& config) {
  SS_ASSIGN_OR_RETURN(config.n_heads, fields.required_size("num_attention_heads"));
  SS_ASSIGN_OR_RETURN(config.n_kv_heads,
                      fields.optional_size("num_key_value_heads", config.n_heads));
  if (config.n_heads % config.n_kv_heads != 0) {
    return errorf("{}: 'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({})",
                  fields.where(), config.n_heads, config.n_kv_heads);
  }
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> head_dim, fields.optional_int("head_dim"));
  bool is_qwen3 =
      arch == Architecture::kArchitectureQwen3 || arch == Architecture::kArchitectureQwen3Moe;
  if (head_dim) {
    SS_ASSIGN_OR_RETURN(config.head_dim, fields.check_size("head_dim", *head_dim));
  } else if (is_qwen3) {
    config.head_dim = 128;  // Qwen3Config / Qwen3MoeConfig default, not hidden / heads
  } else {
    if (config.hidden_size % config.n_heads != 0) {
      return errorf(
          "{}: 'hidden_size' ({}) is not divisible by 'num_attention_heads' ({}); set "
          "'head_dim'",
          fields.where(), config.hidden_size, config.n_heads);
    }
    config.head_dim = config.hidden_size / config.n_heads;
  }
  // RoPE rotates dimension pairs (j, j + head_dim/2).
  if (config.head_dim % 2 != 0) {
    return errorf("{}: 'head_dim' ({}) must be even for RoPE", fields.where(), config.head_dim);
  }
  if (config.n_heads * config.head_dim > kMaxDimension) {
    return errorf("{}: 'num_attention_heads' x 'head_dim' = {} is implausibly large",
                  fields.where(), config.n_heads * config.head_dim);
  }
  return Status::ok_status();
}

Result<ModelConfig> parse_object(const json& root, const std::string& where) {
  if (!root.is_object())
    return errorf("{}: top level must be a JSON object, got {}", where, root.type_name());
  Fields fields(root, where);
  ModelConfig config;
  SS_ASSIGN_OR_RETURN(ArchInfo info, parse_architecture(fields));
  config.arch = info.arch;
  config.model_type = info.model_type;

  SS_ASSIGN_OR_RETURN(std::optional<std::string> act, fields.optional_string("hidden_act"));
  if (act && *act != "silu") {
    return errorf("{}: 'hidden_act' = '{}' is not supported (only silu)", where, printable(*act));
  }
  SS_ASSIGN_OR_RETURN(bool mlp_bias, fields.optional_bool("mlp_bias", false));
  if (mlp_bias) return errorf("{}: 'mlp_bias' = true is not supported", where);

  SS_ASSIGN_OR_RETURN(config.vocab_size, fields.required_size("vocab_size"));
  SS_ASSIGN_OR_RETURN(config.hidden_size, fields.required_size("hidden_size"));
  SS_ASSIGN_OR_RETURN(config.n_layers, fields.required_size("num_hidden_layers"));
  SS_TRY(parse_attention_shape(fields, config.arch, config));

  bool needs_dense_mlp = true;
  if (config.arch == Architecture::kArchitectureQwen3Moe) {
    SS_ASSIGN_OR_RETURN(config.moe, parse_moe(fields, config.n_layers));
    // Some layer is dense iff one is listed in mlp_only_layers (indices are
    // validated) or the step skips layer 0; no need to scan every layer.
    needs_dense_mlp = !config.moe.mlp_only_layers.empty() || config.moe.decoder_sparse_step > 1;
  }
  // A MoE whose every layer is routed has no dense MLP, so its
  // intermediate_size is irrelevant (HF still writes one).
  if (needs_dense_mlp || fields.find("intermediate_size") != nullptr) {
    SS_ASSIGN_OR_RETURN(config.intermediate_size, fields.required_size("intermediate_size"));
  }

  SS_ASSIGN_OR_RETURN(config.max_position_embeddings,
                      fields.optional_size("max_position_embeddings", info.default_max_positions));
  SS_ASSIGN_OR_RETURN(config.rms_norm_eps, fields.positive_number("rms_norm_eps", 1e-6));
  SS_ASSIGN_OR_RETURN(config.rope, parse_rope(fields));
  SS_ASSIGN_OR_RETURN(config.tie_word_embeddings,
                      fields.optional_bool("tie_word_embeddings", false));

  switch (config.arch) {
    case Architecture::kArchitectureQwen2:
      config.attention_bias = true;  // Qwen2Attention hard-codes q/k/v bias
      break;
    case Architecture::kArchitectureMistral:
      config.attention_bias = false;  // MistralAttention has no bias option
      break;
    default:
      SS_ASSIGN_OR_RETURN(config.attention_bias, fields.optional_bool("attention_bias", false));
      break;
  }
  config.qk_norm = config.arch == Architecture::kArchitectureQwen3 ||
                   config.arch == Architecture::kArchitectureQwen3Moe;
  SS_ASSIGN_OR_RETURN(config.sliding_window, parse_sliding_window(fields, config.arch));
  SS_TRY(parse_special_tokens(fields, config));
  // Checkpoints stored quantized: FP8 ones are read (model/stored_quantization.h),
  // the rest refused with the method's name rather than failing later on a
  // tensor's dtype.
  if (const json* quant = fields.find("quantization_config"); quant != nullptr) {
    SS_ASSIGN_OR_RETURN(config.stored_quantization,
                        parse_stored_quantization(*quant, fields.where()));
  }
  SS_ASSIGN_OR_RETURN(config.weight_dtype, parse_dtype(fields));
  return config;
}

// parse_model_config with a chosen label for messages (a path when loading a file).
Result<ModelConfig> parse_with_label(std::string_view json_text, const std::string& where) {
  // Arbitrary input must never throw out of here: parse errors are expected,
  // and the catch-all turns any library exception we failed to foresee (or
  // bad_alloc) into an error instead of a crash.
  try {
    json root;
    try {
      root = json::parse(json_text.begin(), json_text.end());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
      size_t bracket = what.find("] ");
      if (bracket != std::string::npos) what = what.substr(bracket + 2);
      return errorf("{}: invalid JSON at byte {}: {}", where, e.byte, printable(what, 200));
    }
    return parse_object(root, where);
  } catch (const std::exception& e) {
    return errorf("{}: cannot parse: {}", where, printable(e.what(), 200));
  }
}

}  // namespace

const char* architecture_name(Architecture arch) {
  for (const ArchInfo& info : kArchitectures) {
    if (info.arch == arch) return info.model_type;
  }
  return "unknown";
}

bool ModelConfig::layer_is_moe(int64_t layer) const {
  if (moe.n_experts <= 0) return false;
  SS_CHECK_GT(moe.decoder_sparse_step, 0);
  if (std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), layer) !=
      moe.mlp_only_layers.end()) {
    return false;
  }
  return (layer + 1) % moe.decoder_sparse_step == 0;
}

Result<ModelConfig> parse_model_config(std::string_view json_text) {
  return parse_with_label(json_text, "config.json");
}

Result<ModelConfig> load_model_config(const std::string& path) {
  if (gguf::is_gguf_file(path)) {
    SS_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
    auto config = model_config_from_gguf(file);
    if (!config.ok()) return errorf("{}: {}", path, config.message());
    return config;
  }
  std::error_code ec;
  std::string file = std::filesystem::is_directory(path, ec) ? path + "/config.json" : path;
  SS_ASSIGN_OR_RETURN(std::string text, read_text_file(file));
  return parse_with_label(text, file);
}

}  // namespace specstack

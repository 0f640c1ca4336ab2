#include "cli/draft_model_flags.h"

#include <algorithm>

namespace specstack::cli {

void DraftModelFlags::add_to(CLI::App& command) {
  command.add_option("--draft", dir,
                     "draft model folder for speculative prefill and decoding (a small model "
                     "with the target's tokenizer)");
  command.add_option("--draft-config", config_path,
                     "the draft's config.json with --dummy-weights (default: --draft's)");
  add_draft_quantization_option(command, quantization);
}

Status DraftModelFlags::validate(const ModelFlags& model) const {
  if (!config_path.empty() && !model.dummy_weights) {
    return make_error("--draft-config is only used with --dummy-weights; give --draft DIR");
  }
  if (has_draft() && dir.empty() && !model.dummy_weights) {
    return make_error("--draft DIR is required (or --dummy-weights --draft-config F)");
  }
  SS_TRY(draft_weight_quantization(quantization, model));
  return Status::ok_status();
}

Result<ModelInstanceOptions> DraftModelFlags::instance_options(const ModelFlags& model) const {
  ModelInstanceOptions options;
  options.model_dir = dir;
  options.config_path = config_path;
  options.dummy_weights = model.dummy_weights;
  options.dtype_override = model.dtype;
  options.block_size = model.block_size;
  // Beside its target: speculative decoding runs draft and target steps in
  // one loop, so a host draft would stall a GPU target.
  options.device = model.device == "cuda" ? Device::kCuda : Device::kCpu;
  options.gpu_memory_fraction = model.gpu_memory_fraction;
  options.cuda_graphs = !model.no_cuda_graphs;
  SS_ASSIGN_OR_RETURN(options.kv_dtype, model.kv_dtype_option());  // the target's
  SS_ASSIGN_OR_RETURN(options.quantization, draft_weight_quantization(quantization, model));
  return options;
}

void add_draft_quantization_option(CLI::App& command, std::string& quantization) {
  command
      .add_option("--draft-quantization", quantization,
                  "the draft's weights: none (as stored) or fp8 (--device cuda, Hopper: linear "
                  "layers to e4m3 with per-channel scales); the target's --quantization does "
                  "not apply to the draft")
      ->check(CLI::IsMember({"none", "fp8"}));
}

Result<WeightQuantization> draft_weight_quantization(const std::string& quantization,
                                                     const ModelFlags& model) {
  if (quantization.empty() || quantization == "none") return WeightQuantization::kNone;
  if (quantization != "fp8") {
    return errorf("--draft-quantization: unknown value '{}' (expected none or fp8)", quantization);
  }
  if (model.device != "cuda") {
    return make_error("--draft-quantization fp8 needs --device cuda (Hopper FP8 GEMMs)");
  }
  return WeightQuantization::kFp8;
}

const char* weight_format(const std::string& quantization) {
  return quantization.empty() || quantization == "none" ? "as stored" : quantization.c_str();
}

void add_specprefill_tuning(CLI::App& command, SpecPrefillOptions& settings) {
  command.add_option("--specprefill-lookahead", settings.lookahead,
                     "query steps the draft scores with (default 8)");
  command.add_option("--specprefill-chunk", settings.chunk,
                     "prompt tokens kept or dropped together (default 32)");
  command.add_option("--specprefill-pool", settings.pool_kernel,
                     "odd width of the importance smoothing window (default 13)");
}

Status validate_specprefill_settings(const SpecPrefillOptions& settings) {
  if (!(settings.keep_pct > 0 && settings.keep_pct <= 1)) {
    return errorf("--specprefill-keep-pct must be in (0, 1], got {}", settings.keep_pct);
  }
  if (settings.threshold < 0) {
    return errorf("--specprefill-threshold must be >= 0, got {}", settings.threshold);
  }
  if (settings.lookahead < 1) {
    return errorf("--specprefill-lookahead must be >= 1, got {}", settings.lookahead);
  }
  if (settings.chunk < 1) {
    return errorf("--specprefill-chunk must be >= 1, got {}", settings.chunk);
  }
  if (settings.pool_kernel < 1 || settings.pool_kernel % 2 == 0) {
    // The smoothing window is centred on each token, so it needs a middle.
    return errorf("--specprefill-pool must be an odd number >= 1, got {}", settings.pool_kernel);
  }
  return Status::ok_status();
}

void SpecDecodeFlags::add_to(CLI::App& command, const std::string& enabled_help) {
  command.add_flag("--spec-decode", enabled,
                   "speculative decoding: the draft proposes tokens and the target verifies "
                   "them in one step; the output is distributed as the target's alone (needs "
                   "--draft; " +
                       enabled_help + ")");
  tuning_.push_back(command.add_option("--spec-tokens", max_draft_tokens,
                                       "most draft tokens proposed per step, 1..16 (default 4)"));
  tuning_.push_back(command.add_flag(
      "--spec-fixed-k", fixed_k,
      "always propose --spec-tokens tokens (default: adapt to the acceptance rate)"));
  window_option_ = command.add_option(
      "--spec-draft-window", draft_window,
      "sparse draft KV: the draft attends only to its last W tokens (plus the sink)");
  sink_option_ = command.add_option(
      "--spec-draft-sink", draft_sink,
      "with --spec-draft-window: also keep the first S tokens (attention sinks; default 0)");
  tuning_.push_back(window_option_);
  tuning_.push_back(sink_option_);
}

Status SpecDecodeFlags::validate(bool has_draft) const {
  if (!enabled) {
    for (const CLI::Option* option : tuning_) {
      if (option->count() > 0) return errorf("{} needs --spec-decode", option->get_name());
    }
    return Status::ok_status();
  }
  if (!has_draft) {
    return make_error(
        "--spec-decode needs a draft model: give --draft DIR (a small model with the target's "
        "tokenizer)");
  }
  if (max_draft_tokens < 1 || max_draft_tokens > kMaxSpecTokens) {
    return errorf("--spec-tokens must be in [1, {}], got {}", kMaxSpecTokens, max_draft_tokens);
  }
  if (window_option_->count() > 0 && draft_window < 1) {
    return errorf("--spec-draft-window must be >= 1, got {}", draft_window);
  }
  if (sink_option_->count() > 0) {
    if (window_option_->count() == 0) {
      // Sinks only mean something beside a window: a dense draft keeps everything.
      return make_error("--spec-draft-sink needs --spec-draft-window");
    }
    if (draft_sink < 0) return errorf("--spec-draft-sink must be >= 0, got {}", draft_sink);
  }
  return Status::ok_status();
}

SpecDecodeOptions SpecDecodeFlags::engine_options(ModelInstance* draft) const {
  SpecDecodeOptions options;
  options.draft = enabled ? draft : nullptr;
  options.default_on = true;
  options.max_draft_tokens = max_draft_tokens;
  options.adaptive = !fixed_k;
  options.draft_window = draft_window;
  options.draft_sink = draft_window > 0 ? draft_sink : 0;
  return options;  // emulated_acceptance stays off: it is for benchmarks only
}

std::string SpecDecodeFlags::describe() const {
  const std::string kv = draft_window > 0 ? fmt::format("sparse draft KV (window {} + sink {})",
                                                        draft_window, draft_sink)
                                          : std::string("dense draft KV");
  return fmt::format("K {} draft tokens per step ({}), {}", max_draft_tokens,
                     fixed_k ? "fixed" : "adaptive", kv);
}

Result<ModelConfig> load_draft_config(const DraftModelFlags& draft, const ModelConfig& target) {
  auto config = load_model_config(draft.config_path.empty() ? draft.dir : draft.config_path);
  if (!config.ok()) return errorf("draft: {}", config.message());
  // A family shares its tokenizer but may pad the embedding differently
  // (Qwen2.5-0.5B 151936 rows, 7B 152064); a far smaller table is another
  // tokenizer. Ids past the draft's table make a request fall back.
  if (config->vocab_size < target.vocab_size - 1024 ||
      config->vocab_size > target.vocab_size + 1024) {
    return errorf(
        "the draft's vocab_size ({}) is far from the target's ({}); the draft must use "
        "the target's tokenizer",
        config->vocab_size, target.vocab_size);
  }
  return std::move(config).value();
}

Result<std::unique_ptr<ModelInstance>> load_draft_model(const DraftModelFlags& draft,
                                                        const ModelFlags& model, int64_t kv_tokens,
                                                        int64_t step_tokens, Backend& backend) {
  SS_ASSIGN_OR_RETURN(ModelInstanceOptions options, draft.instance_options(model));
  options.kv_tokens = kv_tokens;
  options.max_tokens_per_step = std::max(options.max_tokens_per_step, step_tokens);
  auto instance = ModelInstance::create(options, backend);
  if (!instance.ok()) return errorf("draft: {}", instance.message());
  return instance;
}

}  // namespace specstack::cli

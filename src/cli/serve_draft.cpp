#include "cli/serve_draft.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "kv/kv_cache.h"
#include "tokenizer/vocab_check.h"

namespace specstack::cli {
namespace {

// The vocabulary check: the draft's scores and proposals are token ids, so
// they must mean the target's tokens.
Status check_draft_vocabulary(const DraftFlags& draft, const ModelFlags& model,
                              const ModelConfig& draft_config, const ModelConfig& target_config,
                              const Tokenizer& target_tokenizer) {
  if (model.dummy_weights) {
    // Dummy weights come with no tokenizer of their own to compare.
    // Embedding padding may differ within a family (Qwen2.5: 151936 vs 152064).
    if (std::abs(draft_config.vocab_size - target_config.vocab_size) > 1024) {
      return errorf("the draft's vocab_size ({}) is far from the target's ({})",
                    draft_config.vocab_size, target_config.vocab_size);
    }
    return Status::ok_status();
  }
  if (!Tokenizer::available(draft.source.dir)) {
    std::fprintf(stderr,
                 "specstack: warning: --draft %s has no tokenizer.json; not checking that it "
                 "shares the target's vocabulary\n",
                 draft.source.dir.c_str());
    return Status::ok_status();
  }
  auto draft_tokenizer = Tokenizer::load_dir(draft.source.dir);
  if (!draft_tokenizer.ok()) {
    return errorf("--draft {}: {}", draft.source.dir, draft_tokenizer.message());
  }
  if (Status same = check_same_vocabulary(target_tokenizer, *draft_tokenizer); !same.ok()) {
    return errorf("--draft {}: its tokenizer differs from the target's (target vs draft): {}",
                  draft.source.dir, same.message());
  }
  return Status::ok_status();
}

}  // namespace

void DraftFlags::add_to(CLI::App& command, SpecPrefillOptions& settings) {
  // Without --specprefill a loaded draft serves only requests with "specprefill": true.
  source.add_to(command);
  command
      .add_option("--draft-kv-blocks", kv_blocks,
                  "draft KV cache blocks (overrides --draft-kv-memory-gb)")
      ->check(CLI::PositiveNumber);
  kv_memory_option_ =
      command.add_option("--draft-kv-memory-gb", kv_memory_gb,
                         "draft KV cache size in GiB (default 1; with --spec-decode: as many "
                         "tokens as the target's KV cache)");
  command.add_flag("--specprefill", specprefill,
                   "speculative prefill: the draft scores each long prompt and the target "
                   "prefills only the tokens that matter (needs --draft)");
  command.add_option("--specprefill-threshold", settings.threshold,
                     "apply it to prompts with at least this many uncached tokens (default 8192)");
  command.add_option("--specprefill-keep-pct", settings.keep_pct,
                     "fraction of prompt tokens the target prefills, in (0, 1] (default 0.2)");
  add_specprefill_tuning(command, settings);
  specdecode.add_to(command, "requests speculate unless they send \"speculative_decoding\": false");
}

bool DraftFlags::kv_size_given() const {
  return kv_blocks > 0 || (kv_memory_option_ != nullptr && kv_memory_option_->count() > 0);
}

Status validate_draft_flags(const DraftFlags& draft, const ModelFlags& model,
                            const SpecPrefillOptions& settings) {
  if (draft.specprefill && !draft.has_draft()) {
    return make_error(
        "--specprefill needs a draft model: give --draft DIR (a small model with the target's "
        "tokenizer)");
  }
  SS_TRY(draft.specdecode.validate(draft.has_draft()));
  SS_TRY(draft.source.validate(model));
  SS_TRY(validate_specprefill_settings(settings));
  if (draft.has_draft() && draft.kv_blocks == 0 && !(draft.kv_memory_gb > 0)) {
    return errorf("--draft-kv-memory-gb must be > 0, got {}", draft.kv_memory_gb);
  }
  return Status::ok_status();
}

Result<DraftPlan> plan_draft(const DraftFlags& draft, const ModelFlags& model,
                             const ModelConfig& target_config, const Tokenizer& target_tokenizer) {
  DraftPlan plan;
  SS_ASSIGN_OR_RETURN(plan.options, draft.source.instance_options(model));
  // Not load_draft_config(): it compares config vocab sizes, which a real
  // draft may pad differently; its tokenizer is compared instead.
  auto config = load_model_config(draft.source.config_path.empty() ? draft.source.dir
                                                                   : draft.source.config_path);
  if (!config.ok()) return errorf("draft: {}", config.message());
  plan.config = std::move(config).value();
  SS_TRY(check_draft_vocabulary(draft, model, plan.config, target_config, target_tokenizer));
  return plan;
}

Status size_draft_kv(const DraftFlags& draft, const ModelFlags& model, int64_t target_kv_blocks,
                     int64_t max_context, int32_t max_num_seqs, DraftPlan& plan) {
  KvCacheShape shape;
  shape.n_layers = plan.config.n_layers;
  shape.n_blocks = 1;
  shape.block_size = model.block_size;
  shape.n_kv_heads = plan.config.n_kv_heads;
  shape.head_dim = plan.config.head_dim;
  shape.dtype = model.host_kv_dtype();
  const auto block_bytes = static_cast<double>(KvCache::bytes_per_block(shape));
  const int64_t blocks_per_context = (max_context + model.block_size - 1) / model.block_size;
  const bool spec_decode_sized = draft.specdecode.enabled && !draft.kv_size_given();
  if (draft.kv_blocks > 0) {
    plan.kv_blocks = draft.kv_blocks;
  } else if (spec_decode_sized) {
    if (target_kv_blocks <= 0) {
      plan.kv_blocks = 0;  // the GPU target's pool is sized when it loads: called again then
      return Status::ok_status();
    }
    // Speculative prefill holds one prompt at a time in the draft, but
    // speculative decoding keeps a draft KV for every running sequence, so
    // the draft needs the target's token capacity (cheap: a draft's KV per
    // token is a fraction of the target's) plus, per sequence, the blocks its
    // K proposals may spill into before verification rolls them back. Less
    // would leave sequences the draft cannot hold. A sparse draft window
    // only lowers what is used of it.
    const int64_t k = draft.specdecode.max_draft_tokens;
    const int64_t proposal_blocks = (k + model.block_size - 1) / model.block_size;
    plan.kv_blocks = std::min(target_kv_blocks + proposal_blocks * max_num_seqs,
                              (blocks_per_context + proposal_blocks) * max_num_seqs);
  } else {
    // Never more than every sequence at full context could use, as for the target.
    plan.kv_blocks = std::min(static_cast<int64_t>(draft.kv_memory_gb * 1073741824.0 / block_bytes),
                              blocks_per_context * max_num_seqs);
  }
  if (plan.kv_blocks < 1) {
    return errorf(
        "the draft's KV cache holds no block of {} tokens ({:.1f} KiB each); raise "
        "--draft-kv-memory-gb",
        model.block_size, block_bytes / 1024);
  }
  if (plan.kv_blocks < blocks_per_context) {
    std::fprintf(stderr,
                 "specstack: warning: the draft's KV cache holds %lld tokens, less than the "
                 "context of %lld; longer prompts cannot be scored by the draft (raise "
                 "--draft-kv-memory-gb or --draft-kv-blocks)\n",
                 static_cast<long long>(plan.kv_blocks * model.block_size),
                 static_cast<long long>(max_context));
  }
  if (draft.specdecode.enabled && !spec_decode_sized && target_kv_blocks > 0 &&
      plan.kv_blocks < target_kv_blocks) {
    std::fprintf(stderr,
                 "specstack: warning: the draft's KV cache holds %lld tokens, fewer than the "
                 "target's %lld; sequences the draft cannot hold decode without speculation "
                 "(leave out --draft-kv-memory-gb and --draft-kv-blocks to match the target)\n",
                 static_cast<long long>(plan.kv_blocks * model.block_size),
                 static_cast<long long>(target_kv_blocks * model.block_size));
  }
  plan.options.kv_blocks = plan.kv_blocks;
  return Status::ok_status();
}

std::string describe_draft(const DraftFlags& draft, const ModelFlags& model,
                           ModelInstance& instance, const SpecPrefillOptions& settings,
                           double load_seconds) {
  const ModelConfig& config = instance.config();
  std::string name = draft.source.config_path.empty() ? draft.source.dir : draft.source.config_path;
  if (model.dummy_weights) name += " (dummy weights)";
  const std::string mode =
      draft.specprefill ? fmt::format("on for prompts of >= {} uncached tokens", settings.threshold)
                        : std::string("only for requests with \"specprefill\": true");
  return fmt::format(
      "specstack: draft '{}': {}, {} layers, hidden {}, vocab {}, weights {:.1f} MiB{} (loaded in "
      "{:.2f} s), KV cache {} blocks ({:.1f} MiB); speculative prefill {}: keep {:g}%, "
      "lookahead {}, chunk {}, pool {}",
      name, architecture_name(config.arch), config.n_layers, config.hidden_size, config.vocab_size,
      instance.model().weight_bytes() / 1048576.0,
      draft.source.quantization == "fp8" ? " (fp8 linear layers)" : "", load_seconds,
      instance.pool().n_blocks(), instance.kv().nbytes() / 1048576.0, mode, settings.keep_pct * 100,
      settings.lookahead, settings.chunk, settings.pool_kernel);
}

}  // namespace specstack::cli

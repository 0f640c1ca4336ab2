// The draft model of `specstack serve`: on top of draft_model_flags.h (the
// --draft / --draft-config flags, the SpecPrefill tuning and the speculative
// decoding flags shared with generate and bench), its KV pool sizing,
// --specprefill and its threshold and keep fraction, and the startup check
// that the draft reads token ids as the target does.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "engine/engine.h"
#include "engine/model_instance.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {

struct DraftFlags {
  DraftModelFlags source;      // --draft DIR / --draft-config F
  int64_t kv_blocks = 0;       // --draft-kv-blocks (overrides --draft-kv-memory-gb)
  double kv_memory_gb = 1.0;   // --draft-kv-memory-gb
  bool specprefill = false;    // --specprefill: apply it to every prompt over the threshold
  SpecDecodeFlags specdecode;  // --spec-decode and its tuning

  // Registers the draft flags; the SpecPrefill settings are written to `settings`.
  void add_to(CLI::App& command, SpecPrefillOptions& settings);
  bool has_draft() const { return source.has_draft(); }
  // --draft-kv-blocks or --draft-kv-memory-gb was given.
  bool kv_size_given() const;

 private:
  CLI::Option* kv_memory_option_ = nullptr;
};

// The flag combination and ranges: --specprefill and --spec-decode need a
// draft, keep in (0, 1], lookahead and chunk >= 1, pool odd >= 1, threshold
// >= 0, and the speculative decoding ranges (SpecDecodeFlags::validate).
Status validate_draft_flags(const DraftFlags& draft, const ModelFlags& model,
                            const SpecPrefillOptions& settings);

// Everything known about the draft before its weights are loaded (its
// ModelInstanceOptions are the ones draft_model_flags.h loads with, plus
// kv_blocks).
struct DraftPlan {
  ModelInstanceOptions options;
  ModelConfig config;
  int64_t kv_blocks = 0;
};

// Reads the draft's config and checks its vocabulary against the target's
// (tokenizer.json when the draft has one, config vocab_size with dummy
// weights). Call before loading any weights, so a mismatched draft fails
// fast. The KV pool is sized by size_draft_kv.
Result<DraftPlan> plan_draft(const DraftFlags& draft, const ModelFlags& model,
                             const ModelConfig& target_config, const Tokenizer& target_tokenizer);

// Sizes the draft's KV pool (plan.kv_blocks, plan.options.kv_blocks):
// --draft-kv-blocks, else --draft-kv-memory-gb (default 1 GiB), at most every
// sequence at full context. With --spec-decode and neither flag, it holds
// the target's pool (target_kv_blocks) instead; while that is unknown (0: a
// GPU pool sized when the target loads) plan.kv_blocks stays 0 and this is
// called again once it is known.
Status size_draft_kv(const DraftFlags& draft, const ModelFlags& model, int64_t target_kv_blocks,
                     int64_t max_context, int32_t max_num_seqs, DraftPlan& plan);

// "specstack: draft '...': llama, 8 layers, ...; speculative prefill: ..."
std::string describe_draft(const DraftFlags& draft, const ModelFlags& model,
                           ModelInstance& instance, const SpecPrefillOptions& settings,
                           double load_seconds);

}  // namespace specstack::cli

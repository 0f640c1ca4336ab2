// The draft model of `generate --draft` and `bench ttft`: its flags, the
// SpecPrefill tuning flags and their validation, and loading the draft as a
// second ModelInstance (its own weights and KV pool) on the target's backend.
// (`serve` has its own, larger set in serve_draft.h: KV sizing by memory and
// the tokenizer comparison.)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "base/status.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/model_instance.h"
#include "model/config.h"

namespace specstack::cli {

struct DraftModelFlags {
  std::string dir;          // --draft: HF folder of the draft
  std::string config_path;  // --draft-config: its config.json with --dummy-weights

  void add_to(CLI::App& command);
  bool has_draft() const { return !dir.empty() || !config_path.empty(); }
  // The draft follows the target's --dummy-weights, --dtype and --block-size.
  Status validate(const ModelFlags& model) const;
};

// --specprefill-lookahead, --specprefill-chunk, --specprefill-pool.
void add_specprefill_tuning(CLI::App& command, SpecPrefillOptions& settings);
// keep in (0, 1], threshold >= 0, lookahead >= 1, chunk >= 1, pool odd >= 1.
Status validate_specprefill_settings(const SpecPrefillOptions& settings);

// Reads the draft's config and checks that its vocab_size is the target's:
// its scores are over token ids, so they must mean the target's tokens.
Result<ModelConfig> load_draft_config(const DraftModelFlags& draft, const ModelConfig& target);

// Loads the draft with KV for `kv_tokens` tokens on `backend`.
Result<std::unique_ptr<ModelInstance>> load_draft_model(const DraftModelFlags& draft,
                                                        const ModelFlags& model, int64_t kv_tokens,
                                                        Backend& backend);

}  // namespace specstack::cli

// The draft model of `generate --draft` and `bench ttft`: its flags, the
// SpecPrefill tuning flags and their validation, the speculative decoding
// flags (shared with `serve`), and loading the draft as a second
// ModelInstance (its own weights and KV pool) on the target's backend.
// (`serve` has its own, larger set in serve_draft.h: KV sizing by memory and
// the tokenizer comparison.)
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/model_instance.h"
#include "model/config.h"

namespace specstack::cli {

struct DraftModelFlags {
  std::string dir;                    // --draft: HF folder of the draft
  std::string config_path;            // --draft-config: its config.json with --dummy-weights
  std::string quantization = "none";  // --draft-quantization none|fp8

  void add_to(CLI::App& command);
  bool has_draft() const { return !dir.empty() || !config_path.empty(); }
  // The draft follows the target's --dummy-weights, --dtype and --block-size.
  Status validate(const ModelFlags& model) const;
  // What the draft loads with: its folder or config, the target's device,
  // dtype, block size, memory fraction, graphs and KV dtype, and
  // --draft-quantization (not the target's --quantization). KV sizes are the
  // caller's.
  Result<ModelInstanceOptions> instance_options(const ModelFlags& model) const;
};

// --draft-quantization: the draft's own weight format, independent of the
// target's --quantization (an e4m3 draft under a bf16 target changes only
// which chunks SpecPrefill keeps and which tokens speculative decoding
// proposes; the output stays the target's). The eval commands, which have
// their own --draft, register it through this too.
void add_draft_quantization_option(CLI::App& command, std::string& quantization);
// none or fp8; fp8 needs --device cuda (Hopper FP8 GEMMs).
Result<WeightQuantization> draft_weight_quantization(const std::string& quantization,
                                                     const ModelFlags& model);
// "as stored" for "" / "none", else the --quantization / --draft-quantization
// value itself (an eval's header line names both models' formats).
const char* weight_format(const std::string& quantization);

// --specprefill-lookahead, --specprefill-chunk, --specprefill-pool.
void add_specprefill_tuning(CLI::App& command, SpecPrefillOptions& settings);
// keep in (0, 1], threshold >= 0, lookahead >= 1, chunk >= 1, pool odd >= 1.
Status validate_specprefill_settings(const SpecPrefillOptions& settings);

// Speculative decoding with the draft (SpecDecodeOptions in engine/engine.h),
// the flags serve and generate share: --spec-decode turns it on, the others
// tune it and are errors without it, so a typo never silently does nothing.
struct SpecDecodeFlags {
  bool enabled = false;          // --spec-decode
  int32_t max_draft_tokens = 4;  // --spec-tokens K
  bool fixed_k = false;          // --spec-fixed-k: always K (default: the adaptive policy)
  int32_t draft_window = 0;      // --spec-draft-window W (0: the draft keeps its whole KV)
  int32_t draft_sink = 0;        // --spec-draft-sink S

  // `enabled_help` ends --spec-decode's help: what turning it on means for the command.
  void add_to(CLI::App& command, const std::string& enabled_help);
  // --spec-decode needs a draft; K in [1, kMaxSpecTokens]; W >= 1 when
  // given; S >= 0 and only with W.
  Status validate(bool has_draft) const;
  // The engine's options: off (draft null) unless enabled.
  SpecDecodeOptions engine_options(ModelInstance* draft) const;
  // "K 4 draft tokens per step (adaptive), dense draft KV"
  std::string describe() const;

 private:
  std::vector<CLI::Option*> tuning_;  // the flags that need --spec-decode
  CLI::Option* window_option_ = nullptr;
  CLI::Option* sink_option_ = nullptr;
};

// The verify step runs K + 1 target rows per sequence; past 16 a whole run is
// rarely accepted, so more draft steps only add cost.
inline constexpr int32_t kMaxSpecTokens = 16;

// Reads the draft's config and checks that its vocab_size is the target's:
// its scores are over token ids, so they must mean the target's tokens.
Result<ModelConfig> load_draft_config(const DraftModelFlags& draft, const ModelConfig& target);

// Loads the draft with KV for `kv_tokens` tokens on `backend`. `step_tokens`:
// the engine's step budget, which the draft's catch-up chunks fill; a GPU
// draft sizes its activations for it up front, since growing them later
// drops its decode graphs for good (every draft step then runs eagerly).
Result<std::unique_ptr<ModelInstance>> load_draft_model(const DraftModelFlags& draft,
                                                        const ModelFlags& model, int64_t kv_tokens,
                                                        int64_t step_tokens, Backend& backend);

}  // namespace specstack::cli

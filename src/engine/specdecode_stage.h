// SpecDecodeStage: the draft side of speculative decoding, beside
// SpecPrefillStage and run the same way: ordinary scheduled work on the
// draft model (its own weights, KV pool and runner).
//
// Each engine step, before the target schedules, propose() runs up to k
// batched draft forwards for every running sequence that speculates: the
// first feeds what the draft has not seen yet (its chunked prompt on first
// use, then the tokens accepted last step), the others one draft token each.
// The draft tokens are appended to the sequence (Sequence::n_draft), so the
// scheduler verifies them with the pending token in one chunk of the same
// flat StepPlan as everyone else's prefill and decode rows. After the target
// step, verify() accepts a prefix of them exactly (greedy match or modified
// rejection sampling on the processed distributions) and rolls the draft's
// KV back to what was accepted; the engine rolls back the target's.
//
// The draft sees every prompt token at its own position even when the target
// prefilled a speculative-prefill selection: a SpecPrefill job's draft KV is
// adopted as is. With a sparse draft window, the draft keeps only its sink and
// window blocks, so its memory per sequence and its step cost stay flat.
//
// Constrained requests speculate too (engine/grammar_stage.h): each draft
// row is masked with the parser state after the draft tokens before it, the
// states are kept in Sequence::draft_grammar for the target's verification
// rows, and drafting stops early where the grammar cannot go on (the
// document is complete or admits nothing): then there is no bonus token.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/grammar_stage.h"
#include "engine/request_state.h"
#include "engine/step_plan.h"
#include "specdecode/spec_length_policy.h"

namespace specstack {

// What one verification decided for one sequence.
struct VerifyResult {
  // The tokens to emit, in order: the accepted draft tokens, then the target's
  // own next token (residual draw on a rejection, bonus when all were accepted).
  std::vector<int32_t> tokens;
  int32_t n_drafted = 0;   // draft tokens verified
  int32_t n_accepted = 0;  // of those, accepted
  // Every draft token was accepted and the last left the grammar unable to
  // go on: `tokens` has no token after them. If they do not end the choice
  // themselves (a complete document does), the grammar's dead end does.
  bool grammar_ended = false;
  // With a grammar: the sequence's parser state was moved past the first
  // n_grammar_advanced tokens (the accepted drafts' states, kept from
  // drafting, so emit() need not walk them again). None of them but the
  // last can complete the document, and that case is grammar_ended.
  int32_t n_grammar_advanced = 0;
};

class SpecDecodeStage {
 public:
  // `grammar`: constrained requests' masks (outlives the stage).
  // `device_verification`: the target's runner verifies rows the draft's
  // kept (ModelRunner::verifies_drafts_of): sampled requests then draw their
  // draft tokens where the draft picks tokens and are verified where the
  // target does (on a GPU: no logits row crosses to the host).
  SpecDecodeStage(const SpecDecodeOptions& options, int32_t max_batched_tokens,
                  const ModelConfig& target_config, size_t target_weight_bytes,
                  const GrammarStage& grammar, bool device_verification = false);
  ~SpecDecodeStage();

  // Whether the request's sequences speculate (server default, request override).
  bool speculates(const Request& request) const;
  // Gives choice 0 of a request the draft KV its speculative prefill left:
  // the whole dense prompt (n_prompt slots) on the draft's pool.
  void adopt(Sequence* seq, KvSequence draft_kv, int32_t n_prompt);
  // What propose() ran on the draft (benchmark step records).
  struct ProposeStats {
    int32_t n_tokens = 0;  // tokens forwarded, catch-up rows included (a prompt prefill shows)
    int32_t n_forwards = 0;
    // The first forward: 1-2 catch-up rows a sequence (see propose for its layout).
    double first_forward_seconds = 0;
    // Every draft forward's wall time, each to its sync (the runner returns
    // tokens or logits on the host): propose's time minus this is the
    // host's bookkeeping between forwards.
    double forward_seconds = 0;
    // Of the host's work: before the first forward (choosing who drafts,
    // reserving catch-up slots, building the first plan).
    double setup_seconds = 0;
    // Sequences whose draft KV was first allocated this step: their prompt
    // goes through the draft's prefix cache (hashing every prompt block), so
    // such a step is no steady decode step (bench spec leaves it out).
    int32_t n_admitted = 0;
  };
  // Draft forwards for the running sequences that speculate this step;
  // appends their draft tokens.
  ProposeStats propose(const std::vector<Sequence*>& running);
  // Whether seq's draft tokens of this step were drawn where the draft picks
  // tokens, their rows kept there: the target verifies them where it picks
  // its own (StepPlan::verifications, described by verification()).
  bool verified_on_device(Sequence* seq) const;
  // The target plan's verification of seq's n_draft tokens, its row 0 being
  // logit row first_row; draws nothing (verify() consumes the uniforms used).
  RowVerification verification(Sequence* seq, int32_t first_row) const;
  // The draft's kept rows those verifications read.
  KeptRows kept_rows() const { return options_.draft->runner().kept_rows(); }
  // After the target step that verified seq's n_draft tokens: `rows`
  // [1 + n_draft, vocab] raw target logits, or null with `greedy_ids`
  // [1 + n_draft] when the model chose greedily on its device, or both null
  // and the model's own verification's `device_outcome`. Records the
  // emitted tokens in seq's sampler and rolls the draft back.
  VerifyResult verify(Sequence* seq, const float* rows, const int32_t* greedy_ids, int64_t vocab,
                      const VerifyOutcome* device_outcome = nullptr);
  // Closes the step: sequences whose draft tokens were trimmed away by the
  // scheduler get their draft KV rolled back.
  void end_step();
  // Frees a sequence's draft state (finished, preempted, cancelled).
  void release(Sequence* seq);
  // The target step's time, for the k policy's cost model.
  void observe_target_step(int32_t n_rows, double seconds) {
    policy_.observe_target_step(n_rows, seconds);
  }
  size_t n_states() const { return states_.size(); }

 private:
  struct DraftState;
  DraftState& state_of(Sequence* seq);
  // Token i of the draft's view of seq: the request's whole prompt, then the
  // generated tokens (the target's own tokens may be a sparse selection).
  static int32_t draft_token(const Sequence& seq, int32_t index);
  static int32_t draft_length(const Sequence& seq);
  // Reserves draft slots for the tokens it has not seen; false when the
  // draft's pool is full (the sequence then decodes plainly this step).
  bool reserve_catch_up(Sequence* seq, DraftState& state, int32_t count, int32_t* first_slot);
  // Drops draft blocks that fell out of the sink + window.
  void trim_window(DraftState& state);
  // Draws the next draft token from a draft logits row (the request's
  // sampling on the draft side, its grammar's mask applied); keeps q for
  // rejection sampling.
  int32_t draft_sample(Sequence* seq, DraftState& state, const float* logits, int32_t greedy_id);
  // A device-greedy draft forward's grammar masks, for `rows` (a constrained
  // drafting sequence and its logit row): those made already, then as many
  // others as fit in about the forward's time.
  void fill_draft_masks(StepPlan& plan, const std::vector<std::pair<Sequence*, size_t>>& rows);
  // Advances seq's speculative parser state by the newest draft token
  // (Sequence::draft_grammar); false when drafting must stop there.
  bool advance_grammar(Sequence& seq, DraftState& state) const;
  void rollback_round(DraftState& state, int32_t n_accepted);
  // A sampled request whose draft rows can stay on the device for a
  // verification there (no penalties or grammar: those need the host's
  // distributions; logprobs the model computes).
  bool samples_on_device(const Sequence& seq) const;

  SpecDecodeOptions options_;
  const GrammarStage& grammar_;
  bool device_verification_ = false;
  int32_t max_batched_tokens_;
  int64_t draft_vocab_;
  SpecLengthPolicy policy_;
  // A draft decode forward: the fastest recent one, slowly forgotten (0: none yet).
  double draft_step_seconds_ = 0;
  std::mt19937_64 emulation_rng_;
  std::unordered_map<Sequence*, std::unique_ptr<DraftState>> states_;
};

}  // namespace specstack

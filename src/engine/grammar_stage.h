// GrammarStage: grammar-constrained decoding (response_format json_schema /
// json_object, "grammar") as one stage of the sampling path. A request whose
// RequestOptions::constraint is set gets a TriggeredMatcher per choice (its own
// parser state, so n > 1 choices diverge freely). Before sampling, every
// logit the grammar does not admit becomes -inf and EOS survives only where
// the document may end; so greedy, sampling, top-k/p and penalties all pick
// among admitted tokens. After sampling the token advances the matcher; a
// document that cannot continue ends the choice with "stop".
//
// With RequestOptions::constraint_trigger the grammar applies lazily
// (grammar/triggered_matcher.h): free until the trigger string appears in the
// output (tool_choice "auto": a call's opening marker), constrained through
// the call, then free again (parallel calls) or complete.
//
// With speculative decoding the draft proposes only tokens the grammar
// admits: SpecDecodeStage masks each draft row with the parser state after
// the draft tokens before it and keeps those states with the sequence
// (Sequence::draft_grammar), so the target's verification row i is masked
// with the state after draft tokens 0..i-1 (on the host or as a device
// bitmask). Rejection sampling then compares the masked (processed)
// distributions of both sides, and the output stays distributed exactly as
// constrained decoding without a draft (specdecode/rejection_sampler.h).
// The overloads taking a matcher serve those speculative states.
//
// On the GPU a greedy constrained row is decided on the device like any
// greedy row: fill_mask() writes the row's mask as a bitmask into the
// StepPlan (model/logit_masks.h; on the engine thread while the GPU runs the
// forward, through StepPlan::fill_masks) and the sampling kernel reads
// masked tokens as -inf, so no logits come down to the host. Rows that
// sample on the host (temperature, penalties, logprobs, n > 1) use mask()
// on their logits as before.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specstack {

namespace grammar {
class TriggeredMatcher;
}  // namespace grammar
struct Request;
struct Sequence;

enum class MaskFill {
  kMaskNone,     // every token is admitted: the row needs no mask
  kMaskFilled,   // the bits say which tokens are admitted
  kMaskDeadEnd,  // nothing is admitted (as mask() returning false)
  kMaskUnknown,  // fill_known_mask: not made yet, the bits untouched
};

enum class GrammarOutcome {
  kGrammarContinue,  // the token was admitted; more may follow
  kGrammarComplete,  // admitted, and the document is complete: nothing may follow
  kGrammarRejected,  // not admitted (only when nothing was: a dead end or all -inf logits)
};

class GrammarStage {
 public:
  explicit GrammarStage(std::vector<int32_t> eos_ids) : eos_ids_(std::move(eos_ids)) {}

  static bool constrained(const Request& request);
  // Gives a new choice of a constrained request its own parser state.
  void attach(Sequence& seq) const;
  // -inf outside the grammar's mask; false when nothing at all is admitted
  // (the grammar cannot continue with this vocabulary and may not end).
  bool mask(Sequence& seq, std::span<float> logits) const;
  // The same rule (EOS where the document may end) as a bitmask over
  // bits.size() * 32 ids, for a model that masks on its device.
  MaskFill fill_mask(Sequence& seq, std::span<uint32_t> bits) const;
  GrammarOutcome accept(Sequence& seq, int32_t token) const;

  // The same with an explicit parser state of seq's (a speculative one).
  bool mask(const Sequence& seq, grammar::TriggeredMatcher& state, std::span<float> logits) const;
  MaskFill fill_mask(const Sequence& seq, grammar::TriggeredMatcher& state,
                     std::span<uint32_t> bits) const;
  // The same only where the state's mask is made already (cached): a draft
  // row's, which cannot wait for a trie walk between two draft forwards.
  MaskFill fill_known_mask(const Sequence& seq, grammar::TriggeredMatcher& state,
                           std::span<uint32_t> bits) const;
  GrammarOutcome accept(const Sequence& seq, grammar::TriggeredMatcher& state, int32_t token) const;
  // Some token (or EOS) is admitted next in that state.
  bool any_admitted(const Sequence& seq, grammar::TriggeredMatcher& state) const;

 private:
  std::span<const int32_t> eos_for(const Sequence& seq) const;
  std::vector<int32_t> eos_ids_;  // the model's EOS ids
};

}  // namespace specstack

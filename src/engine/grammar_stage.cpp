#include "engine/grammar_stage.h"

#include "engine/request_state.h"

namespace specstack {

bool GrammarStage::constrained(const Request& request) {
  return request.options.constraint != nullptr;
}

void GrammarStage::attach(Sequence& seq) const {
  if (constrained(*seq.request)) {
    seq.grammar.emplace(seq.request->options.constraint, seq.request->options.constraint_trigger);
  }
}

std::span<const int32_t> GrammarStage::eos_for(const Sequence& seq) const {
  // ignore_eos: the choice ends when the document is complete instead.
  if (seq.request->options.params.ignore_eos) return {};
  return eos_ids_;
}

bool GrammarStage::mask(Sequence& seq, std::span<float> logits) const {
  return !seq.grammar || mask(seq, *seq.grammar, logits);
}

MaskFill GrammarStage::fill_mask(Sequence& seq, std::span<uint32_t> bits) const {
  return seq.grammar ? fill_mask(seq, *seq.grammar, bits) : MaskFill::kMaskNone;
}

GrammarOutcome GrammarStage::accept(Sequence& seq, int32_t token) const {
  return seq.grammar ? accept(seq, *seq.grammar, token) : GrammarOutcome::kGrammarContinue;
}

bool GrammarStage::mask(const Sequence& seq, grammar::TriggeredMatcher& state,
                        std::span<float> logits) const {
  state.apply(logits, eos_for(seq));
  // A dead end: no token continues the document and it may not end here.
  // (Admitted tokens whose own logits are -inf or NaN are the sampler's
  // problem; accept() refuses what it then picks.)
  return state.any_admitted(eos_for(seq));
}

MaskFill GrammarStage::fill_mask(const Sequence& seq, grammar::TriggeredMatcher& state,
                                 std::span<uint32_t> bits) const {
  if (!state.fill_bitmask(bits, eos_for(seq))) return MaskFill::kMaskNone;
  return state.any_admitted(eos_for(seq)) ? MaskFill::kMaskFilled : MaskFill::kMaskDeadEnd;
}

MaskFill GrammarStage::fill_known_mask(const Sequence& seq, grammar::TriggeredMatcher& state,
                                       std::span<uint32_t> bits) const {
  const std::optional<bool> filled = state.fill_known_bitmask(bits, eos_for(seq));
  if (!filled) return MaskFill::kMaskUnknown;
  if (!*filled) return MaskFill::kMaskNone;
  return state.any_admitted(eos_for(seq)) ? MaskFill::kMaskFilled : MaskFill::kMaskDeadEnd;
}

bool GrammarStage::any_admitted(const Sequence& seq, grammar::TriggeredMatcher& state) const {
  return state.any_admitted(eos_for(seq));
}

GrammarOutcome GrammarStage::accept(const Sequence& seq, grammar::TriggeredMatcher& state,
                                    int32_t token) const {
  switch (state.accept(token, eos_for(seq))) {
    case grammar::TriggeredOutcome::kTriggeredContinue:
      return GrammarOutcome::kGrammarContinue;
    case grammar::TriggeredOutcome::kTriggeredComplete:
      return GrammarOutcome::kGrammarComplete;
    case grammar::TriggeredOutcome::kTriggeredRejected:
      return GrammarOutcome::kGrammarRejected;
  }
  return GrammarOutcome::kGrammarRejected;
}

}  // namespace specstack

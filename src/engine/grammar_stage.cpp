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
  if (!seq.grammar) return true;
  seq.grammar->apply(logits, eos_for(seq));
  // A dead end: no token continues the document and it may not end here.
  // (Admitted tokens whose own logits are -inf or NaN are the sampler's
  // problem; accept() refuses what it then picks.)
  return seq.grammar->any_admitted(eos_for(seq));
}

MaskFill GrammarStage::fill_mask(Sequence& seq, std::span<uint32_t> bits) const {
  if (!seq.grammar || !seq.grammar->fill_bitmask(bits, eos_for(seq))) return MaskFill::kMaskNone;
  return seq.grammar->any_admitted(eos_for(seq)) ? MaskFill::kMaskFilled : MaskFill::kMaskDeadEnd;
}

GrammarOutcome GrammarStage::accept(Sequence& seq, int32_t token) const {
  if (!seq.grammar) return GrammarOutcome::kGrammarContinue;
  switch (seq.grammar->accept(token, eos_for(seq))) {
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

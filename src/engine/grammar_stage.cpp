#include "engine/grammar_stage.h"

#include "engine/request_state.h"

namespace specstack {

bool GrammarStage::constrained(const Request& request) {
  return request.options.constraint != nullptr;
}

void GrammarStage::attach(Sequence& seq) const {
  if (constrained(*seq.request)) seq.grammar.emplace(seq.request->options.constraint);
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
  return seq.grammar->mask().count() > 0 || (seq.grammar->can_end() && !eos_for(seq).empty());
}

GrammarOutcome GrammarStage::accept(Sequence& seq, int32_t token) const {
  if (!seq.grammar) return GrammarOutcome::kGrammarContinue;
  if (!seq.grammar->accept(token, eos_for(seq))) return GrammarOutcome::kGrammarRejected;
  return seq.grammar->must_end() ? GrammarOutcome::kGrammarComplete
                                 : GrammarOutcome::kGrammarContinue;
}

}  // namespace specstack

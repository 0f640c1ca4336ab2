#include "engine/grammar_stage.h"

#include <cmath>

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
  for (float l : logits) {
    if (l != -INFINITY) return true;
  }
  // Every admitted token may have had a -inf logit of its own: only a
  // grammar whose mask is empty (and that may not end) is a dead end.
  return seq.grammar->mask().count() > 0 || (seq.grammar->can_end() && !eos_for(seq).empty());
}

GrammarOutcome GrammarStage::accept(Sequence& seq, int32_t token) const {
  if (!seq.grammar) return GrammarOutcome::kGrammarContinue;
  if (!seq.grammar->accept(token, eos_for(seq))) return GrammarOutcome::kGrammarRejected;
  return seq.grammar->must_end() ? GrammarOutcome::kGrammarComplete
                                 : GrammarOutcome::kGrammarContinue;
}

}  // namespace specstack

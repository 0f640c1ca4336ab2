// GrammarTrigger: a grammar that applies lazily, from the point where the
// output first contains a trigger string (llama.cpp's grammar triggers,
// vLLM's structural tags). It is how tool_choice "auto" constrains calls
// without constraining the text around them: generation is free until the
// model writes the call's opening marker, then the grammar (whose sentences
// begin with the trigger) governs the rest of the call.
//
// The trigger is matched on the bytes of the sampled tokens, so a marker
// split over several tokens ("<", "tool", "_call", ">") fires on the token
// that completes it. TriggerScanner is the string matcher (KMP states): its
// state is how many bytes of the trigger the output currently ends with.
//
// A token that completes the trigger may carry bytes past it; those must be
// the grammar's too. trigger_refusals() lists, for a scanner state, the
// tokens that would complete the trigger with bytes the grammar refuses; the
// free steps mask exactly those, so the token that fires the trigger is always
// one the grammar admits, and every other free token is untouched.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/token_constraint.h"

namespace specstack::grammar {

struct GrammarTrigger {
  std::string text;  // the grammar's sentences begin with it; not empty
  // Fires only as the output's first bytes other than whitespace (the Llama
  // 3.1 JSON call format, whose call is the whole output); otherwise at the
  // first occurrence anywhere.
  bool at_start = false;
  // After the grammar's sentence is complete: true, the output is free again
  // and the trigger armed (parallel calls); false, the output ends there.
  bool repeat = false;
};

class TriggerScanner {
 public:
  explicit TriggerScanner(const GrammarTrigger& trigger);
  // States are 0..size(); size() is "fired". kDisarmed: an at_start trigger
  // after other output: it can no longer fire.
  static constexpr int kDisarmed = -1;
  int step(int state, uint8_t byte) const;
  int size() const { return static_cast<int>(text_.size()); }

 private:
  std::string text_;
  bool at_start_;
  std::vector<int> failure_;  // KMP: longest proper border of text_[0, i)
};

// The tokens that, fed from scanner state `state`, complete the trigger and
// then carry bytes the grammar does not admit after it. Computed by
// scanning the whole vocabulary (a few ms at 150K tokens).
TokenMask trigger_refusals(const GrammarTrigger& trigger, int state, const Grammar& grammar,
                           const TokenVocabulary& vocabulary);

}  // namespace specstack::grammar

// TriggeredMatcher: one sequence's grammar state when the grammar may apply
// lazily (grammar/grammar_trigger.h). Without a trigger it is a TokenMatcher
// from the first token on. With one, the sequence starts free: logits pass
// untouched except the few tokens that would fire the trigger into bytes the
// grammar refuses; the token that completes the trigger starts the grammar
// (fed the trigger and the rest of that token), and from then on every
// token is masked as in eager mode. When the grammar's sentence is complete
// the output is either free again with the trigger re-armed (repeat) or done.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "grammar/grammar_trigger.h"
#include "grammar/token_constraint.h"

namespace specstack::grammar {

enum class TriggeredOutcome {
  kTriggeredContinue,  // admitted; more may follow
  kTriggeredComplete,  // admitted, and the output must end here
  kTriggeredRejected,  // not admitted (the sampler picked a masked token)
};

class TriggeredMatcher {
 public:
  TriggeredMatcher(std::shared_ptr<TokenConstraint> constraint,
                   std::optional<GrammarTrigger> trigger);

  // The grammar governs the next token.
  bool active() const { return matcher_.has_value(); }
  // -inf on every logit the next token may not take (see the header note);
  // EOS ids keep theirs when free or where the grammar may end.
  void apply(std::span<float> logits, std::span<const int32_t> eos_ids);
  // The same as a bitmask (TokenMatcher::fill_bitmask); false, `bits`
  // untouched, when every token is admitted (free with the trigger disarmed).
  bool fill_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids);
  // The same where the mask is made already (TokenMatcher::fill_known_bitmask):
  // nullopt, `bits` untouched, where it would take a walk.
  std::optional<bool> fill_known_bitmask(std::span<uint32_t> bits,
                                         std::span<const int32_t> eos_ids);
  // Some token (or EOS) is admitted next. Always true when free.
  bool any_admitted(std::span<const int32_t> eos_ids);
  TriggeredOutcome accept(int32_t token, std::span<const int32_t> eos_ids);
  // The trigger has fired at least once.
  bool fired() const { return fired_; }

 private:
  TriggeredOutcome sentence_done();
  // While free and armed: the tokens that would fire the trigger into bytes
  // the grammar refuses.
  std::shared_ptr<const TokenMask> refusals();

  std::shared_ptr<TokenConstraint> constraint_;
  std::optional<GrammarTrigger> trigger_;
  std::optional<TriggerScanner> scanner_;
  int scan_state_ = 0;
  std::optional<TokenMatcher> matcher_;  // set while the grammar governs
  bool fired_ = false;
};

}  // namespace specstack::grammar

#include "grammar/grammar_trigger.h"

#include "base/check.h"

namespace specstack::grammar {

namespace {

bool is_space(uint8_t b) {
  return b == ' ' || b == '\n' || b == '\t' || b == '\r';
}

}  // namespace

TriggerScanner::TriggerScanner(const GrammarTrigger& trigger)
    : text_(trigger.text), at_start_(trigger.at_start), failure_(text_.size() + 1, 0) {
  SS_CHECK_MSG(!text_.empty(), "a grammar trigger needs a text");
  // failure_[i]: the longest proper prefix of text_[0, i) that is also its suffix.
  for (size_t i = 1, k = 0; i < text_.size(); ++i) {
    while (k > 0 && text_[i] != text_[k]) k = size_t(failure_[k]);
    if (text_[i] == text_[k]) ++k;
    failure_[i + 1] = int(k);
  }
}

int TriggerScanner::step(int state, uint8_t byte) const {
  if (state == kDisarmed || state == size()) return state;
  if (at_start_) {
    // Only whitespace may precede the trigger; anything else disarms it.
    if (byte == static_cast<uint8_t>(text_[size_t(state)])) return state + 1;
    return state == 0 && is_space(byte) ? 0 : kDisarmed;
  }
  int k = state;
  while (k > 0 && byte != static_cast<uint8_t>(text_[size_t(k)])) k = failure_[size_t(k)];
  return byte == static_cast<uint8_t>(text_[size_t(k)]) ? k + 1 : 0;
}

TokenMask trigger_refusals(const GrammarTrigger& trigger, int state, const Grammar& grammar,
                           const TokenVocabulary& vocabulary) {
  const TriggerScanner scanner(trigger);
  TokenMask refused;
  refused.words.assign((static_cast<size_t>(vocabulary.size()) + 63) / 64, 0);
  std::shared_ptr<const Grammar> g(std::shared_ptr<const Grammar>(), &grammar);  // not owned
  for (int32_t id = 0; id < vocabulary.size(); ++id) {
    const std::string& bytes = vocabulary.bytes(id);
    int s = state;
    size_t fired_at = bytes.size();
    for (size_t i = 0; i < bytes.size() && s != scanner.size(); ++i) {
      s = scanner.step(s, static_cast<uint8_t>(bytes[i]));
      if (s == scanner.size()) fired_at = i + 1;
    }
    if (s != scanner.size()) continue;
    GrammarMatcher m(g);
    if (!m.accept_bytes(trigger.text) ||
        !m.accept_bytes(std::string_view(bytes).substr(fired_at))) {
      refused.set(id);
    }
  }
  return refused;
}

}  // namespace specstack::grammar

#include "grammar/triggered_matcher.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>

namespace specstack::grammar {

TriggeredMatcher::TriggeredMatcher(std::shared_ptr<TokenConstraint> constraint,
                                   std::optional<GrammarTrigger> trigger)
    : constraint_(std::move(constraint)), trigger_(std::move(trigger)) {
  if (trigger_) {
    scanner_.emplace(*trigger_);
  } else {
    matcher_.emplace(constraint_);
  }
}

void TriggeredMatcher::apply(std::span<float> logits, std::span<const int32_t> eos_ids) {
  if (matcher_) {
    matcher_->apply(logits, eos_ids);
    return;
  }
  if (scan_state_ == TriggerScanner::kDisarmed) return;
  const std::shared_ptr<const TokenMask> refused = refusals();
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w < refused->words.size(); ++w) {
    for (uint64_t bits = refused->words[w]; bits != 0; bits &= bits - 1) {
      const size_t id = w * 64 + size_t(std::countr_zero(bits));
      if (id < logits.size()) logits[id] = kMinusInf;
    }
  }
}

std::optional<bool> TriggeredMatcher::fill_known_bitmask(std::span<uint32_t> bits,
                                                         std::span<const int32_t> eos_ids) {
  if (matcher_ && !matcher_->fill_known_bitmask(bits, eos_ids)) return std::nullopt;
  if (matcher_) return true;
  return fill_bitmask(bits, eos_ids);  // free: the trigger's refusals, made once per grammar
}

bool TriggeredMatcher::fill_bitmask(std::span<uint32_t> bits, std::span<const int32_t> eos_ids) {
  if (matcher_) {
    matcher_->fill_bitmask(bits, eos_ids);
    return true;
  }
  if (scan_state_ == TriggerScanner::kDisarmed) return false;
  std::fill(bits.begin(), bits.end(), ~uint32_t{0});
  const std::shared_ptr<const TokenMask> refused = refusals();
  for (size_t w = 0; w < refused->words.size(); ++w) {
    for (uint64_t word = refused->words[w]; word != 0; word &= word - 1) {
      const size_t id = w * 64 + size_t(std::countr_zero(word));
      if (id / 32 < bits.size()) bits[id / 32] &= ~(uint32_t{1} << (id % 32));
    }
  }
  return true;
}

std::shared_ptr<const TokenMask> TriggeredMatcher::refusals() {
  // Keyed by the trigger and the scanner state: every sequence of every
  // request with this grammar and trigger shares the lists.
  const std::string key = std::string(trigger_->at_start ? "start:" : "any:") +
                          std::to_string(scan_state_) + ":" + trigger_->text;
  const int state = scan_state_;
  const GrammarTrigger& trigger = *trigger_;
  TokenConstraint& c = *constraint_;
  return c.side_mask(
      key, [&] { return trigger_refusals(trigger, state, *c.grammar(), c.vocabulary()); });
}

bool TriggeredMatcher::any_admitted(std::span<const int32_t> eos_ids) {
  if (!matcher_) return true;
  return matcher_->mask().count() > 0 || (matcher_->can_end() && !eos_ids.empty());
}

TriggeredOutcome TriggeredMatcher::sentence_done() {
  if (!trigger_ || !trigger_->repeat) return TriggeredOutcome::kTriggeredComplete;
  matcher_.reset();
  scan_state_ = trigger_->at_start ? TriggerScanner::kDisarmed : 0;
  return TriggeredOutcome::kTriggeredContinue;
}

TriggeredOutcome TriggeredMatcher::accept(int32_t token, std::span<const int32_t> eos_ids) {
  if (matcher_) {
    if (!matcher_->accept(token, eos_ids)) return TriggeredOutcome::kTriggeredRejected;
    return matcher_->must_end() ? sentence_done() : TriggeredOutcome::kTriggeredContinue;
  }
  // Free: EOS and special tokens (no bytes) leave the scanner as it is.
  if (std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end() || token < 0 ||
      token >= constraint_->vocabulary().size()) {
    return TriggeredOutcome::kTriggeredContinue;
  }
  const std::string& bytes = constraint_->vocabulary().bytes(token);
  for (size_t i = 0; i < bytes.size(); ++i) {
    scan_state_ = scanner_->step(scan_state_, static_cast<uint8_t>(bytes[i]));
    if (scan_state_ != scanner_->size()) continue;
    // Fired: the grammar takes over from the trigger's first byte, which
    // may lie in an earlier token; its sentence starts with the trigger.
    fired_ = true;
    matcher_.emplace(constraint_);
    if (!matcher_->accept_bytes(trigger_->text) ||
        !matcher_->accept_bytes(std::string_view(bytes).substr(i + 1))) {
      matcher_.reset();  // only when the sampler picked a refused token
      return TriggeredOutcome::kTriggeredRejected;
    }
    return matcher_->must_end() ? sentence_done() : TriggeredOutcome::kTriggeredContinue;
  }
  return TriggeredOutcome::kTriggeredContinue;
}

}  // namespace specstack::grammar

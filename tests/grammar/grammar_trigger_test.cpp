// Lazily applied grammars (grammar/grammar_trigger.h,
// grammar/triggered_matcher.h) on a hand-made vocabulary: the trigger's
// string matcher (overlapping prefixes, the at-start kind), a marker split
// over several tokens, the free steps masking only the tokens that would fire
// the trigger into bytes the grammar refuses, and what happens after the
// sentence (free again with repeat, complete without).
#include <gtest/gtest.h>

#include <cmath>

#include "grammar/gbnf_parser.h"
#include "grammar/triggered_matcher.h"

namespace specstack::grammar {
namespace {

TEST(TriggerScanner, FindsTheFirstOccurrenceAcrossOverlaps) {
  TriggerScanner s(GrammarTrigger{"abac", false, false});
  int state = 0;
  for (char c : std::string("ababa")) state = s.step(state, uint8_t(c));
  EXPECT_EQ(state, 3);  // "aba" of "abac" still open after "ababa"
  EXPECT_EQ(s.step(state, 'c'), 4);
  EXPECT_EQ(s.step(4, 'x'), 4);  // fired stays fired

  TriggerScanner start(GrammarTrigger{"{", true, false});
  EXPECT_EQ(start.step(0, ' '), 0);
  EXPECT_EQ(start.step(0, '\n'), 0);
  EXPECT_EQ(start.step(0, '{'), 1);
  EXPECT_EQ(start.step(0, 'H'), TriggerScanner::kDisarmed);
  EXPECT_EQ(start.step(TriggerScanner::kDisarmed, '{'), TriggerScanner::kDisarmed);
}

class TriggeredMatcherTest : public ::testing::Test {
 protected:
  // Token ids: index into kTokens.
  static constexpr const char* kTokens[] = {
      "hi", " ", "<", "tool", "_call",          ">",           ">\n", ">x",
      "{",  "}", "a", "b",    "\n</tool_call>", "<tool_call>", "\n"};
  enum : int32_t {
    kHi,
    kSp,
    kLt,
    kTool,
    kCall,
    kGt,
    kGtNl,
    kGtX,
    kOpen,
    kClose,
    kA,
    kB,
    kEnd,
    kMarker,
    kNl,
    kEos
  };

  void SetUp() override {
    std::vector<std::string> bytes(std::begin(kTokens), std::end(kTokens));
    bytes.push_back("");  // kEos: special, no bytes
    auto g = parse_gbnf("root ::= \"<tool_call>\\n{\" [ab]* \"}\\n</tool_call>\"\n");
    ASSERT_TRUE(g.ok()) << g.message();
    constraint_ =
        std::make_shared<TokenConstraint>(std::make_shared<const Grammar>(std::move(g).value()),
                                          std::make_shared<const TokenVocabulary>(bytes));
  }

  std::vector<float> logits_after_apply(TriggeredMatcher& m) {
    std::vector<float> logits(kEos + 1, 1.0f);
    m.apply(logits, eos_);
    return logits;
  }

  // fill_bitmask against apply on a model vocabulary larger than the
  // tokenizer's (padding ids): the same tokens keep their logits.
  void expect_bitmask_equals_apply(TriggeredMatcher& m) {
    constexpr size_t kModelVocab = 70;
    std::vector<float> logits(kModelVocab, 1.0f);
    m.apply(logits, eos_);
    std::vector<uint32_t> bits((kModelVocab + 31) / 32, 0xA5A5A5A5u);  // every word is written
    const bool masked = m.fill_bitmask(bits, eos_);
    for (size_t t = 0; t < kModelVocab; ++t) {
      const bool kept = !masked || ((bits[t / 32] >> (t % 32)) & 1u) != 0;
      EXPECT_EQ(kept, !std::isinf(logits[t])) << "token " << t;
    }
  }

  std::shared_ptr<TokenConstraint> constraint_;
  std::vector<int32_t> eos_ = {kEos};
};

TEST_F(TriggeredMatcherTest, SplitMarkerStartsTheGrammar) {
  TriggeredMatcher m(constraint_, GrammarTrigger{"<tool_call>", false, false});
  EXPECT_FALSE(m.active());
  // Free: nothing masked but ">x"-like completions (none possible yet).
  for (float l : logits_after_apply(m)) EXPECT_EQ(l, 1.0f);
  for (int32_t t : {kHi, kSp, kLt, kTool, kCall}) {
    EXPECT_EQ(m.accept(t, eos_), TriggeredOutcome::kTriggeredContinue);
  }
  // After "...<tool_call": ">" and ">\n" may complete the marker, ">x" may not.
  std::vector<float> logits = logits_after_apply(m);
  EXPECT_EQ(logits[kGt], 1.0f);
  EXPECT_EQ(logits[kGtNl], 1.0f);
  EXPECT_TRUE(std::isinf(logits[kGtX]));
  EXPECT_EQ(logits[kHi], 1.0f);
  EXPECT_EQ(logits[kEos], 1.0f);
  EXPECT_EQ(m.accept(kGtNl, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_TRUE(m.active());
  EXPECT_TRUE(m.fired());
  // Active: only "{" now; EOS not before the end.
  logits = logits_after_apply(m);
  for (int32_t t = 0; t <= kEos; ++t) EXPECT_EQ(std::isinf(logits[size_t(t)]), t != kOpen) << t;
  EXPECT_EQ(m.accept(kHi, eos_), TriggeredOutcome::kTriggeredRejected);
  for (int32_t t : {kOpen, kA, kB, kClose}) {
    EXPECT_EQ(m.accept(t, eos_), TriggeredOutcome::kTriggeredContinue);
  }
  EXPECT_EQ(m.accept(kEnd, eos_), TriggeredOutcome::kTriggeredComplete);
}

TEST_F(TriggeredMatcherTest, RepeatFreesTheOutputAgain) {
  TriggeredMatcher m(constraint_, GrammarTrigger{"<tool_call>", false, true});
  for (int32_t t : {kMarker, kNl, kOpen, kClose}) {
    EXPECT_EQ(m.accept(t, eos_), TriggeredOutcome::kTriggeredContinue);
  }
  EXPECT_EQ(m.accept(kEnd, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_FALSE(m.active());
  EXPECT_EQ(m.accept(kHi, eos_), TriggeredOutcome::kTriggeredContinue);  // free text again
  EXPECT_EQ(m.accept(kMarker, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_TRUE(m.active());
}

TEST_F(TriggeredMatcherTest, WithoutATriggerTheGrammarAppliesAtOnce) {
  TriggeredMatcher m(constraint_, std::nullopt);
  EXPECT_TRUE(m.active());
  std::vector<float> logits = logits_after_apply(m);
  EXPECT_TRUE(std::isinf(logits[kHi]));
  EXPECT_EQ(logits[kMarker], 1.0f);
  EXPECT_EQ(logits[kLt], 1.0f);
}

TEST_F(TriggeredMatcherTest, AtStartTriggerDisarmsAfterOtherText) {
  auto g = parse_gbnf("root ::= \"{\" [ab]* \"}\"\n");
  ASSERT_TRUE(g.ok());
  auto c = std::make_shared<TokenConstraint>(
      std::make_shared<const Grammar>(std::move(g).value()),
      std::make_shared<const TokenVocabulary>(constraint_->vocabulary()));
  TriggeredMatcher call(c, GrammarTrigger{"{", true, false});
  EXPECT_EQ(call.accept(kSp, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_EQ(call.accept(kOpen, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_TRUE(call.active());
  EXPECT_EQ(call.accept(kClose, eos_), TriggeredOutcome::kTriggeredComplete);
  TriggeredMatcher text(c, GrammarTrigger{"{", true, false});
  EXPECT_EQ(text.accept(kHi, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_EQ(text.accept(kOpen, eos_), TriggeredOutcome::kTriggeredContinue);
  EXPECT_FALSE(text.active());
}

// The device path's bitmask (GrammarStage::fill_mask) says exactly what
// apply() says at every step: free, armed mid-marker, active, free again
// after a repeated sentence, disarmed, and EOS where the document may end.
TEST_F(TriggeredMatcherTest, BitmaskEqualsApplyAtEveryStep) {
  TriggeredMatcher m(constraint_, GrammarTrigger{"<tool_call>", false, true});
  for (int32_t t : {kHi, kLt, kTool, kCall, kGtNl, kOpen, kA, kClose, kEnd, kSp, kMarker, kNl}) {
    SCOPED_TRACE(::testing::Message() << "before token " << t);
    expect_bitmask_equals_apply(m);
    ASSERT_EQ(m.accept(t, eos_), TriggeredOutcome::kTriggeredContinue);
  }
  expect_bitmask_equals_apply(m);

  TriggeredMatcher disarmed(constraint_, GrammarTrigger{"<", true, false});
  ASSERT_EQ(disarmed.accept(kHi, eos_), TriggeredOutcome::kTriggeredContinue);
  std::vector<uint32_t> bits(3, 7u);
  EXPECT_FALSE(disarmed.fill_bitmask(bits, eos_));  // nothing to mask
  EXPECT_EQ(bits, (std::vector<uint32_t>{7u, 7u, 7u}));
  expect_bitmask_equals_apply(disarmed);

  auto g = parse_gbnf("root ::= [ab]+\n");
  ASSERT_TRUE(g.ok());
  auto c = std::make_shared<TokenConstraint>(
      std::make_shared<const Grammar>(std::move(g).value()),
      std::make_shared<const TokenVocabulary>(constraint_->vocabulary()));
  TriggeredMatcher eager(c, std::nullopt);
  expect_bitmask_equals_apply(eager);  // EOS refused: nothing yet
  ASSERT_EQ(eager.accept(kA, eos_), TriggeredOutcome::kTriggeredContinue);
  expect_bitmask_equals_apply(eager);  // EOS admitted
  std::vector<uint32_t> end(3, 0u);
  ASSERT_TRUE(eager.fill_bitmask(end, eos_));
  EXPECT_NE((end[0] >> kEos) & 1u, 0u);
}

// A speculative draft row's mask (fill_known_bitmask) comes only from masks
// already made: none before any walk of a state, the bitmask fill_bitmask
// gives once another matcher in the same state made it, and free text's
// refusals at once. The accepted-token path must not need the mask either.
TEST_F(TriggeredMatcherTest, KnownBitmaskOnlyFromMasksMade) {
  auto g = parse_gbnf("root ::= \"{\" [ab]* \"}\"\n");
  ASSERT_TRUE(g.ok());
  auto c = std::make_shared<TokenConstraint>(
      std::make_shared<const Grammar>(std::move(g).value()),
      std::make_shared<const TokenVocabulary>(constraint_->vocabulary()));
  TriggeredMatcher first(c, std::nullopt);
  TriggeredMatcher second = first;  // the same state, its own (unmade) mask
  std::vector<uint32_t> bits(3, 7u);
  EXPECT_EQ(first.fill_known_bitmask(bits, eos_), std::nullopt);
  EXPECT_EQ(bits, (std::vector<uint32_t>{7u, 7u, 7u}));  // untouched
  // Accepting without the mask made: the byte walk decides, as the mask would.
  EXPECT_EQ(first.accept(kHi, eos_), TriggeredOutcome::kTriggeredRejected);
  EXPECT_EQ(first.accept(kOpen, eos_), TriggeredOutcome::kTriggeredContinue);
  std::vector<uint32_t> made(3, 0u);
  ASSERT_TRUE(second.fill_bitmask(made, eos_));  // walks, and caches the mask
  TriggeredMatcher third(c, std::nullopt);
  EXPECT_EQ(third.fill_known_bitmask(bits, eos_), std::optional<bool>(true));
  EXPECT_EQ(bits, made);
  // Free text with an armed trigger: its refusals are the known mask.
  TriggeredMatcher free_text(constraint_, GrammarTrigger{"<tool_call>", false, false});
  std::vector<uint32_t> free_bits(3, 0u), expected(3, 0u);
  EXPECT_EQ(free_text.fill_known_bitmask(free_bits, eos_), std::optional<bool>(true));
  ASSERT_TRUE(free_text.fill_bitmask(expected, eos_));
  EXPECT_EQ(free_bits, expected);
}

}  // namespace
}  // namespace specstack::grammar

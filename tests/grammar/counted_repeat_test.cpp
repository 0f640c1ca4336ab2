// Counted repetitions (grammar.h: x{m,k}, x{m,} and x{0,k} as one element
// with a counter on the matcher's stack) against an independent oracle
// (std::regex over every short string), and the token masks of positions
// inside them (their split is classified once per count class,
// grammar/trie_walk.h) against brute force, including tokens longer than
// the distance to a bound.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "base/check.h"
#include "grammar/gbnf_parser.h"
#include "grammar/matcher.h"
#include "grammar/reachable_tops.h"
#include "grammar/token_constraint.h"

namespace specstack::grammar {
namespace {

std::shared_ptr<const Grammar> grammar_of(std::string_view gbnf, GrammarLimits limits = {}) {
  auto g = parse_gbnf(gbnf, limits);
  SS_CHECK_MSG(g.ok(), g.ok() ? "" : g.message());
  return std::make_shared<const Grammar>(std::move(g).value());
}

size_t counted_elements(const Grammar& g) {
  size_t n = 0;
  for (const Element& e : g.elements) n += e.kind == ElementKind::kElementRepeat ? 1 : 0;
  return n;
}

// Every string over `alphabet` of at most `max_length` bytes.
std::vector<std::string> all_strings(const std::string& alphabet, size_t max_length) {
  std::vector<std::string> out = {""};
  for (size_t begin = 0, length = 0; length < max_length; ++length) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i) {
      for (char c : alphabet) out.push_back(out[i] + c);
    }
    begin = end;
  }
  return out;
}

// The grammar accepts exactly the sentences of `regex` (whole strings and,
// for prefixes, the same first rejected byte as the unrolled grammar).
void expect_same_language(std::string_view gbnf, const std::string& regex,
                          const std::string& alphabet, size_t max_length,
                          GrammarLimits limits = {}) {
  auto g = grammar_of(gbnf, limits);
  const std::regex re(regex);
  int sentences = 0;
  for (const std::string& s : all_strings(alphabet, max_length)) {
    GrammarMatcher m(g);
    const bool accepted = m.accept_bytes(s) && m.can_end();
    ASSERT_EQ(accepted, std::regex_match(s, re))
        << gbnf << " on '" << s << "' (unrolled minimum " << limits.unrolled_minimum << ")";
    sentences += accepted ? 1 : 0;
  }
  EXPECT_GT(sentences, 2) << gbnf;
}

TEST(CountedRepeat, BoundedTailsBecomeOneCountedElement) {
  EXPECT_EQ(counted_elements(*grammar_of(R"(root ::= [a-c]{0,5})")), 1u);
  EXPECT_EQ(counted_elements(*grammar_of(R"(root ::= [a-c]{2,9})")), 1u);       // 2 plain + {0,7}
  EXPECT_EQ(counted_elements(*grammar_of(R"(root ::= [a-c]{1,2} "x"?)")), 0u);  // one optional
  EXPECT_EQ(counted_elements(*grammar_of(R"(root ::= [a-c]{3} [a-c]*)")), 0u);
  // A body that may match nothing cannot be counted by bytes: unrolled.
  EXPECT_EQ(counted_elements(*grammar_of(R"(root ::= ("a"?){0,3} "b")")), 0u);
}

TEST(CountedRepeat, LanguageMatchesARegex) {
  expect_same_language(R"(root ::= "<" [ab]{0,4} ">")", "<[ab]{0,4}>", "ab<>", 8);
  expect_same_language(R"(root ::= [ab]{2,4} ";")", "[ab]{2,4};", "ab;", 7);
  // Counted in tail position (no return entry below the counter).
  expect_same_language(R"(root ::= "x" [ab]{0,3})", "x[ab]{0,3}", "abx", 6);
  // Nested: a counted body holding a counted repetition.
  expect_same_language(R"(root ::= ("x" [0-9]{0,3}){0,2} ";")", "(x[0-9]{0,3}){0,2};", "x1;", 9);
  // The body a rule with alternatives of different lengths.
  expect_same_language(R"(root ::= item{0,3} "."
item ::= "a" | "bc")",
                       "(a|bc){0,3}\\.", "abc.", 8);
  // The nullable body, unrolled instead.
  expect_same_language(R"(root ::= ("a"?){0,3} "b")", "a{0,3}b", "ab", 6);
}

TEST(CountedRepeat, RejectsAtTheByteAfterTheLastAllowedIteration) {
  auto g = grammar_of(R"(root ::= "\"" [a-z]{0,3} "\"")");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_bytes("\"abc"));
  EXPECT_FALSE(m.accept_byte('d'));  // the count is spent
  EXPECT_EQ(m.next_bytes().count(), 1u);
  EXPECT_TRUE(m.accept_byte('"'));
  EXPECT_TRUE(m.must_end());
}

// Every repetition counted whole, whatever its minimum.
GrammarLimits count_every_minimum() {
  GrammarLimits limits;
  limits.unrolled_minimum = 0;
  return limits;
}

TEST(CountedRepeat, MinimumsBecomeOneCountedElement) {
  // Past GrammarLimits::unrolled_minimum no copy of the body is made.
  auto g = grammar_of(R"(root ::= [a-c]{1000,})");
  EXPECT_EQ(counted_elements(*g), 1u);
  EXPECT_LT(g->elements.size(), 20u);
  EXPECT_EQ(g->repeats[0].min, 1000u);
  EXPECT_EQ(g->repeats[0].max, kUnboundedRepeat);
  auto bounded = grammar_of(R"(root ::= [a-c]{600,1000})");
  EXPECT_EQ(counted_elements(*bounded), 1u);
  EXPECT_LT(bounded->elements.size(), 20u);
  EXPECT_EQ(bounded->repeats[0].min, 600u);
  EXPECT_EQ(bounded->repeats[0].max, 1000u);
  // Up to it, the copies stay (each its own position) and only the tail counts.
  auto small = grammar_of(R"(root ::= [a-c]{4,9})");
  EXPECT_EQ(counted_elements(*small), 1u);
  EXPECT_EQ(small->repeats[0].min, 0u);
  EXPECT_EQ(small->repeats[0].max, 5u);
  // Counted with any minimum when asked to.
  auto all = grammar_of(R"(root ::= [a-c]{1,} "x"{2} "y")", count_every_minimum());
  EXPECT_EQ(counted_elements(*all), 2u);
  // x{m,} of a body that may match nothing would be a left-recursive x*.
  auto nullable = parse_gbnf(R"(root ::= ("a"?){6,} "b")");
  ASSERT_FALSE(nullable.ok());
  EXPECT_NE(nullable.message().find("may match nothing"), std::string::npos) << nullable.message();
  // x{m,k} of it matches what x{0,k} does: unrolled.
  expect_same_language(R"(root ::= ("a"?){6,7} "b")", "a{0,7}b", "ab", 9);
}

TEST(CountedRepeat, MinimumsMatchARegex) {
  for (const GrammarLimits& limits : {GrammarLimits{}, count_every_minimum()}) {
    expect_same_language(R"(root ::= "<" [ab]{1,3} ">")", "<[ab]{1,3}>", "ab<>", 7, limits);
    expect_same_language(R"(root ::= "<" [ab]{5,7} ">")", "<[ab]{5,7}>", "ab<>", 10, limits);
    expect_same_language(R"(root ::= [ab]{5,5} ";")", "[ab]{5};", "ab;", 8, limits);
    expect_same_language(R"(root ::= [ab]{5} ";")", "[ab]{5};", "ab;", 8, limits);
    expect_same_language(R"(root ::= [ab]{1,} ";")", "[ab]+;", "ab;", 7, limits);
    expect_same_language(R"(root ::= [ab]{6,} ";")", "[ab]{6,};", "ab;", 9, limits);
    expect_same_language(R"(root ::= [ab]{0,} ";")", "[ab]*;", "ab;", 6, limits);
    // In tail position (no return entry below the counter).
    expect_same_language(R"(root ::= "x" [ab]{5,})", "x[ab]{5,}", "abx", 9, limits);
    expect_same_language(R"(root ::= "x" [ab]{2,3})", "x[ab]{2,3}", "abx", 6, limits);
    // Nested minimums, and a body with alternatives of different lengths.
    expect_same_language(R"(root ::= ("x" [0-9]{2,3}){2,} ";")", "(x[0-9]{2,3}){2,};", "x1;", 10,
                         limits);
    expect_same_language(R"(root ::= item{5,6} "."
item ::= "a" | "bc")",
                         "(a|bc){5,6}\\.", "abc.", 9, limits);
  }
}

// The mask by brute force: every token's bytes fed to a copy of the matcher.
TokenMask brute_force_mask(const GrammarMatcher& state, const TokenVocabulary& v) {
  TokenMask m;
  m.words.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    GrammarMatcher copy = state;
    if (!v.bytes(id).empty() && copy.accept_bytes(v.bytes(id))) m.set(id);
  }
  return m;
}

// Masks inside counted repetitions, at counts 0, 1, the maximum and between,
// with tokens longer than the count left (which must be walked with the real
// count) and tokens crossing out of the repetition: equal to brute force, for
// every split depth, without and with the compile-time classification (of
// the tops, and of the tops and their counts).
TEST(CountedRepeat, MasksMatchBruteForceAtEveryCount) {
  auto g = grammar_of(R"g(root ::= "[" item ("," item){0,3} "]"
item ::= "\"" [a-c]{0,4} "\"" | [0-9]{1,5})g");
  ASSERT_EQ(counted_elements(*g), 3u);
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "[",    "]",     ",",    "\"",    "a",        "b",         "c",   "ab",     "abc",
      "abca", "abcab", "a\"",  "ab\"",  "abca\"",   "abcab\"",   "\",", "\"]",    "\",\"",
      "1",    "12",    "123",  "1234",  "12345",    "123456",    "1,",  "12345]", "123456]",
      "[\"",  "[1",    "\"a",  "\"abc", "\"abca\"", "\"abcab\"", "aa",  "x",      ",1",
      "],",   "1,2,3", "a\"]", ",\"a",  "abc\",\"", "cc\"]"});
  std::mt19937 rng(11);
  for (size_t depth : {1, 2, 3}) {
    // 0: lazy; 1: tops classified at compile time; 2: and their counts.
    for (int compiled : {0, 1, 2}) {
      TokenConstraintOptions options;
      options.context_depth = depth;
      auto c = std::make_shared<TokenConstraint>(g, v, options);
      PrecomputeOptions precompute;
      precompute.counts = compiled == 2;
      if (compiled > 0) {
        EXPECT_GT(c->precompute(precompute), 0u);
      }
      const int64_t classified_at_compile = c->stats().positions_classified;
      int states = 0;
      for (int walk = 0; walk < 400; ++walk) {
        TokenMatcher m(c);
        for (int step = 0; step < 16; ++step, ++states) {
          const TokenMask expected = brute_force_mask(m.matcher(), *v);
          ASSERT_EQ(m.mask().words, expected.words)
              << "depth " << depth << " compiled " << compiled << " walk " << walk;
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < v->size(); ++id) {
            if (expected.test(id)) allowed.push_back(id);
          }
          if (allowed.empty()) break;
          ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()], {}));
        }
      }
      EXPECT_GT(states, 2000);
      if (compiled) {
        // Every top met while decoding was found when compiling.
        EXPECT_EQ(c->stats().positions_classified, classified_at_compile) << depth;
      }
    }
  }
}

// Masks inside counters with a minimum, at every count of a short
// repetition (so at 0, m - 1, m, m + 1, k - 1 and k) with tokens longer than
// the distance to either bound, and at random states: equal to brute force,
// lazily and with the compile-time classification (tops, and tops and their
// counts), for every split depth. Counted whole (GrammarLimits) so that
// small minimums exercise the counter.
TEST(CountedRepeat, MasksMatchBruteForceAroundTheMinimum) {
  auto g = grammar_of(R"g(root ::= "[" item ("," item){2,4} "]" | "<" [a-c]{3,} ">"
item ::= "\"" [a-c]{2,6} "\"" | [0-9]{3})g",
                      count_every_minimum());
  ASSERT_EQ(counted_elements(*g), 4u);
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "[",        "]",       ",",      "\"",     "a",         "b",     "c",      "ab",
      "abc",      "abca",    "abcab",  "abcabc", "abcabca",   "a\"",   "ab\"",   "abc\"",
      "abca\"",   "abcab\"", "\",",    "\"]",    "\",\"",     "1",     "12",     "123",
      "1234",     "1,",      "12,",    "123,",   "123]",      "[\"",   "[1",     "\"a",
      "\"abc",    "\"ab\"",  "<",      ">",      "<a",        "<abc>", "abc>",   "ab>",
      "abcab>",   "a>",      "aa",     "x",      ",1",        "1,2,3", "a\"]",   ",\"a",
      "abc\",\"", "cc\"]",   "\"a\",", "123,12", "123,123,1", "<aa",   "<aaaaa>"});
  std::mt19937 rng(7);
  for (size_t depth : {1, 2, 3}) {
    for (int compiled : {0, 1, 2}) {
      TokenConstraintOptions options;
      options.context_depth = depth;
      auto c = std::make_shared<TokenConstraint>(g, v, options);
      PrecomputeOptions precompute;
      precompute.counts = compiled == 2;
      if (compiled > 0) {
        EXPECT_GT(c->precompute(precompute), 0u);
      }
      const int64_t classified_at_compile = c->stats().positions_classified;
      // Every count of the strings' and the angle run's counters.
      for (const char* prefix : {"[\"", "<"}) {
        TokenMatcher m(c);
        ASSERT_TRUE(m.accept_bytes(prefix));
        for (int count = 0; count <= 9; ++count) {
          ASSERT_EQ(m.mask().words, brute_force_mask(m.matcher(), *v).words)
              << prefix << " count " << count << " depth " << depth << " compiled " << compiled;
          if (!m.accept_bytes("a")) break;
        }
      }
      int states = 0;
      for (int walk = 0; walk < 300; ++walk) {
        TokenMatcher m(c);
        for (int step = 0; step < 20; ++step, ++states) {
          const TokenMask expected = brute_force_mask(m.matcher(), *v);
          ASSERT_EQ(m.mask().words, expected.words)
              << "depth " << depth << " compiled " << compiled << " walk " << walk;
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < v->size(); ++id) {
            if (expected.test(id)) allowed.push_back(id);
          }
          if (allowed.empty()) break;
          ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()], {}));
        }
      }
      EXPECT_GT(states, 1500);
      if (compiled) {
        // Every top met while decoding was found when compiling, the
        // counts past the minimum included.
        EXPECT_EQ(c->stats().positions_classified, classified_at_compile) << depth;
      }
    }
  }
}

// A recursive grammar has unboundedly many states: the search stops at its
// limits and still returns the tops it met.
TEST(ReachableTops, StopsAtItsLimitsOnRecursiveGrammars) {
  auto g = grammar_of(R"g(root ::= "(" root ")" | "x")g");
  ReachableTopsLimits limits;
  limits.max_states = 50;
  const auto tops = reachable_tops(*g, 3, limits);
  EXPECT_FALSE(tops.empty());
  EXPECT_LE(tops.size(), 50u * 2);
}

// The compile-time classification stops at its node budget (a hostile
// grammar's first request); what it left is classified on first use and the
// masks are the same.
TEST(ReachableTops, PrecomputeStopsAtItsNodeBudget) {
  auto g = grammar_of(R"(root ::= "\"" [a-z]{0,6} "\"" ("," [0-9]{1,4})*)");
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "\"", "a", "ab", "abcdefg", "ab\"", "\",", "1", "12", ",1", "\",12", "x"});
  auto full = std::make_shared<TokenConstraint>(g, v);
  const size_t all = full->precompute();
  auto partial = std::make_shared<TokenConstraint>(g, v);
  PrecomputeOptions options;
  options.max_nodes = 1;
  const size_t some = partial->precompute(options);
  EXPECT_GE(some, 1u);
  EXPECT_LT(some, all);
  TokenMatcher a(full), b(partial);
  for (int32_t id : {0, 2, 4, 8, 7}) {  // "\"" "ab" "ab\"" ",1" "12"
    ASSERT_EQ(a.mask().words, b.mask().words);
    ASSERT_TRUE(a.accept(id, {}));
    ASSERT_TRUE(b.accept(id, {}));
  }
  EXPECT_GT(partial->stats().positions_classified, static_cast<int64_t>(some));
}

}  // namespace
}  // namespace specstack::grammar

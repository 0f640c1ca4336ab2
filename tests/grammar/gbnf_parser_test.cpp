#include "grammar/gbnf_parser.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"

namespace specstack::grammar {
namespace {

std::shared_ptr<const Grammar> parse_ok(std::string_view text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.message());
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(g).value());
}

// Whether the whole of `text` is a sentence of the grammar.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

// How many leading bytes the matcher accepts.
size_t accepted_prefix(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m.accept_byte(static_cast<uint8_t>(text[i]))) return i;
  }
  return text.size();
}

TEST(GbnfParser, LiteralsAlternationAndGroups) {
  auto g = parse_ok(R"(root ::= "ab" ("c" | "de") x   # comment
x ::= "!" | "")");
  EXPECT_TRUE(matches(g, "abc!"));
  EXPECT_TRUE(matches(g, "abde"));
  EXPECT_FALSE(matches(g, "abd"));
  EXPECT_FALSE(matches(g, "ab"));
  EXPECT_EQ(accepted_prefix(g, "abx"), 2u);
}

TEST(GbnfParser, Repetitions) {
  auto g = parse_ok(R"(root ::= "a"* "b"+ "c"? [0-9]{2} [x]{1,3} "y"{2,})");
  EXPECT_TRUE(matches(g, "b12xyy"));
  EXPECT_TRUE(matches(g, "aaabbc99xxxyyyy"));
  EXPECT_FALSE(matches(g, "12xyy"));      // b+ needs one
  EXPECT_FALSE(matches(g, "b1xyy"));      // {2}
  EXPECT_FALSE(matches(g, "b12xxxxyy"));  // {1,3}
  EXPECT_FALSE(matches(g, "b12xy"));      // {2,}
  EXPECT_EQ(accepted_prefix(g, "b12xxxx"), 6u);
}

TEST(GbnfParser, CharacterClassesAreOverCodePoints) {
  auto g = parse_ok(R"(root ::= [^"\\]* "|" [α-ω] "|" .)");
  EXPECT_TRUE(matches(g, "héllo|β|€"));
  EXPECT_FALSE(matches(g, "a\"b|β|x"));
  EXPECT_FALSE(matches(g, "a|z|x"));
  // A lone continuation byte is no code point.
  EXPECT_FALSE(matches(g, "a|β|\x80"));
  // Surrogates are never encoded.
  EXPECT_FALSE(matches(g, "a|β|\xED\xA0\x80"));
}

TEST(GbnfParser, EscapesAndMultilineRules) {
  auto g = parse_ok("root ::=\n  \"\\x41\\u00e9\\t\" \n  | \"\\\"\"\nother ::= \"z\"");
  EXPECT_TRUE(matches(g, "A\xC3\xA9\t"));
  EXPECT_TRUE(matches(g, "\""));
}

TEST(GbnfParser, RightRecursionNests) {
  auto g = parse_ok(R"g(root ::= "(" root ")" | "x")g");
  EXPECT_TRUE(matches(g, "((x))"));
  EXPECT_FALSE(matches(g, "((x)"));
  EXPECT_EQ(accepted_prefix(g, "(x))"), 3u);
}

TEST(GbnfParser, ErrorsNameLineAndColumn) {
  auto bad = parse_gbnf("root ::= \"a\"\nx ::= [a-");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("line 2"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("unterminated character class"), std::string::npos);

  auto undefined = parse_gbnf("root ::= foo");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.message().find("'foo' is used (line 1, column 10)"), std::string::npos)
      << undefined.message();

  auto no_root = parse_gbnf("start ::= \"a\"");
  ASSERT_FALSE(no_root.ok());
  EXPECT_NE(no_root.message().find("no rule 'root'"), std::string::npos);

  auto left = parse_gbnf("root ::= root \"a\" | \"b\"");
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.message().find("left-recursive"), std::string::npos) << left.message();

  auto nullable_star = parse_gbnf("root ::= (\"a\"?)*");
  ASSERT_FALSE(nullable_star.ok());
  EXPECT_NE(nullable_star.message().find("left-recursive"), std::string::npos);

  for (const char* text : {"root ::= \"abc", "root ::= (\"a\"", "root ::= \"a\"{3,1}",
                           "root ::= \"\\q\"", "root ::= *", "root = \"a\"", "",
                           "root ::= \"a\"\nroot ::= \"b\"", "root ::= \"a\"{2000}"}) {
    auto r = parse_gbnf(text);
    EXPECT_FALSE(r.ok()) << text;
    if (!r.ok()) {
      EXPECT_FALSE(r.message().empty());
    }
  }
}

TEST(GbnfParser, DeepNestingIsRefusedNotRecursed) {
  std::string text = "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')');
  auto r = parse_gbnf(text);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("nested too deeply"), std::string::npos);
}

TEST(GrammarMatcher, EndStatesAndNextBytes) {
  auto g = parse_ok(R"(root ::= "a" "b"?)");
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.next_bytes().test('a'));
  EXPECT_EQ(m.next_bytes().count(), 1u);
  ASSERT_TRUE(m.accept_byte('a'));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());
  ASSERT_TRUE(m.accept_byte('b'));
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept_byte('b'));
  EXPECT_TRUE(m.must_end());  // a rejected byte leaves the state
}

TEST(GrammarMatcher, StarRunsInConstantStackDepth) {
  auto g = parse_ok(R"(root ::= "[" [0-9]* "]")");
  GrammarMatcher m(g);
  ASSERT_TRUE(m.accept_byte('['));
  const size_t depth = m.stacks().data.size();
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.accept_byte('7'));
  EXPECT_EQ(m.stacks().data.size(), depth);
  EXPECT_TRUE(m.accept_byte(']'));
  EXPECT_TRUE(m.can_end());
}

}  // namespace
}  // namespace specstack::grammar

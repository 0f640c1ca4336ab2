#include "grammar/token_constraint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <span>

#include "base/check.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_generator.h"
#include "grammar/json_schema.h"
#include "grammar/real_vocabulary.h"
#include "grammar/schema_check.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> grammar_of(std::string_view gbnf) {
  auto g = parse_gbnf(gbnf);
  SS_CHECK_MSG(g.ok(), g.ok() ? "" : g.message());
  return std::make_shared<const Grammar>(std::move(g).value());
}

std::shared_ptr<const Grammar> schema_grammar(const Json& schema) {
  auto text = json_schema_to_gbnf(schema);
  SS_CHECK_MSG(text.ok(), text.ok() ? "" : text.message());
  return grammar_of(*text);
}

// The mask by brute force: every token's bytes fed to a copy of the matcher.
TokenMask brute_force_mask(const GrammarMatcher& state, const TokenVocabulary& v) {
  TokenMask m;
  m.words.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.bytes(id).empty()) continue;
    GrammarMatcher copy = state;
    if (copy.accept_bytes(v.bytes(id))) m.set(id);
  }
  return m;
}

TEST(TokenVocabulary, TrieIsPreorderWithSubtreeEnds) {
  TokenVocabulary v({"ab", "a", "", "b", "abc", "ab"});
  // root, a, ab, abc, b
  ASSERT_EQ(v.nodes().size(), 5u);
  EXPECT_EQ(v.nodes()[1].byte, 'a');
  EXPECT_EQ(v.nodes()[1].subtree_end, 4u);
  EXPECT_EQ(v.nodes()[2].tokens_end - v.nodes()[2].tokens_begin, 2u);  // "ab" twice
  EXPECT_EQ(v.nodes()[4].byte, 'b');
  EXPECT_EQ(v.max_depth(), 3u);
}

TEST(TokenConstraint, MaskMatchesBruteForceOnASmallVocabulary) {
  auto g = grammar_of(R"(root ::= "{" [a-c]* "}" "!"?)");
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "{", "}", "a", "ab", "abc", "abd", "{a", "}!", "!", "x", "{}", "{}!", "c}", "", "é"});
  auto constraint = std::make_shared<TokenConstraint>(g, v);
  TokenMatcher matcher(constraint);
  const std::vector<int32_t> eos = {99};
  for (int32_t token : {6, 3, 12, 8}) {  // "{a" "ab" "c}" "!"
    EXPECT_EQ(matcher.mask().words, brute_force_mask(matcher.matcher(), *v).words);
    ASSERT_TRUE(matcher.accept(token, eos)) << token;
  }
  EXPECT_TRUE(matcher.must_end());
  EXPECT_EQ(matcher.mask().count(), 0);
  EXPECT_TRUE(matcher.accept(99, eos));

  TokenMatcher fresh(constraint);
  EXPECT_FALSE(fresh.accept(99, eos));  // EOS only where the document may end
  EXPECT_FALSE(fresh.accept(9, eos));   // "x"
  EXPECT_FALSE(fresh.accept(13, eos));  // no bytes
  std::vector<float> logits(101, 1.0f);
  fresh.apply(logits, eos);
  for (int32_t id = 0; id < 101; ++id) {
    const bool allowed = id == 0 || id == 6 || id == 10 || id == 11;  // { {a {} {}!
    EXPECT_EQ(std::isfinite(logits[id]), allowed) << id;
  }
  ASSERT_TRUE(fresh.accept(10, eos));  // "{}"
  std::vector<float> end_logits(101, 1.0f);
  fresh.apply(end_logits, eos);
  EXPECT_TRUE(std::isfinite(end_logits[99]));  // may end, or add "!"
  EXPECT_TRUE(std::isfinite(end_logits[8]));
  EXPECT_FALSE(std::isfinite(end_logits[100]));  // beyond the vocabulary
  EXPECT_LT(constraint->stats().mask_walks, constraint->stats().mask_requests);  // cached
}

using testing::Family;
using testing::family;

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "email":{"type":"string","maxLength":20},"tags":{"type":"array","items":{"type":"string"},"maxItems":4},
        "score":{"type":"number"},"ok":{"type":"boolean"}},"required":["name","age"]})",
    R"({"$defs":{"item":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},
        "kind":{"enum":["a","b","c d"]},"when":{"type":"string","format":"date"},
        "sub":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/item"}]}},"required":["id","kind","sub"]}},
        "type":"array","items":{"$ref":"#/$defs/item"},"minItems":1,"maxItems":3})",
    R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,4}$"},
        "meta":{"type":"object"},"v":{"type":["integer","null","string"]},
        "when":{"type":"string","format":"date-time"}},"required":["code","meta"]})",
    R"({"type":"object"})",
};

// The byte offset at which the grammar first rejects `text`, or text.size().
size_t first_rejected_byte(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!m.accept_byte(static_cast<uint8_t>(text[i]))) return i;
  }
  return text.size();
}

// Feeds `ids` through a TokenMatcher; returns the index of the first token the
// mask refuses (ids.size() when all pass), checking that accept() agrees.
size_t first_refused_token(const std::shared_ptr<TokenConstraint>& c,
                           const std::vector<int32_t>& ids) {
  TokenMatcher m(c);
  for (size_t k = 0; k < ids.size(); ++k) {
    if (!m.mask().test(ids[k])) return k;
    EXPECT_TRUE(m.accept(ids[k], {}));
  }
  return ids.size();
}

void run_property(const std::string& name, int docs_per_schema,
                  const TokenConstraintOptions& options = {}) {
  const Family* f = family(name);
  ASSERT_NE(f, nullptr);
  std::mt19937_64 rng(11);
  int n_docs = 0, n_rejected = 0, n_accepted_mutations = 0;
  for (size_t schema_index = 0; schema_index < std::size(kSchemas); ++schema_index) {
    const Json schema = Json::parse(kSchemas[schema_index]);
    auto g = schema_grammar(schema);
    auto c = std::make_shared<TokenConstraint>(g, f->vocabulary, options);
    testing::JsonGenerator gen(schema, rng());
    for (int i = 0; i < docs_per_schema; ++i, ++n_docs) {
      const Json doc = gen.generate();
      std::string why;
      ASSERT_TRUE(testing::schema_valid(doc, schema, schema, &why)) << why;
      const std::string text = gen.serialize(doc);
      const std::vector<int32_t> ids = f->tokenizer->encode(text, false);
      std::string joined;
      for (int32_t id : ids) joined += f->tokenizer->token_bytes(id);
      ASSERT_EQ(joined, text);
      // Every token of a conforming document passes the mask, and it may end.
      TokenMatcher m(c);
      for (size_t k = 0; k < ids.size(); ++k) {
        ASSERT_TRUE(m.mask().test(ids[k])) << name << ": token " << k << " '"
                                           << f->tokenizer->token_bytes(ids[k]) << "' of " << text;
        ASSERT_TRUE(m.accept(ids[k], {}));
      }
      ASSERT_TRUE(m.can_end()) << text;

      // A mutation: a control byte inserted (never valid JSON text, so the
      // grammar must refuse exactly there), or a byte replaced by another.
      // Mutations keep the text valid UTF-8 (the tokenizer would otherwise
      // see U+FFFD): they happen at an ASCII byte.
      std::string bad = text;
      size_t at = rng() % text.size();
      while (static_cast<unsigned char>(text[at]) >= 0x80) at = (at + 1) % text.size();
      const bool insert = rng() % 2 == 0;
      if (insert) {
        bad.insert(at, 1, '\x01');
      } else {
        const std::string bytes =
            "{}[]\":,0a-1.\\ ";  // no e/E: 1e999 is JSON nlohmann cannot parse
        bad[at] = bytes[rng() % bytes.size()];
      }
      const size_t rejected = first_rejected_byte(g, bad);
      const Json parsed = Json::parse(bad, nullptr, false);
      const bool valid =
          !parsed.is_discarded() && testing::schema_valid(parsed, schema, schema, nullptr);
      if (insert) {
        ASSERT_EQ(rejected, at) << bad;
      }
      if (rejected == bad.size()) {
        // Accepted bytes: only a valid document may be complete.
        GrammarMatcher full(g);
        if (full.accept_bytes(bad) && full.can_end()) {
          ASSERT_TRUE(valid) << "the grammar accepts an invalid document: " << bad;
          ++n_accepted_mutations;
        }
        continue;
      }
      ASSERT_FALSE(valid && bad.size() <= text.size() + 1 && rejected < at) << bad;
      ASSERT_GE(rejected, std::min(at, bad.size()));
      ++n_rejected;
      // Token level: the tokens before the rejected byte pass, the token
      // holding it is refused by the mask.
      const std::vector<int32_t> bad_ids = f->tokenizer->encode(bad, false);
      std::string bad_joined;
      for (int32_t id : bad_ids) bad_joined += f->tokenizer->token_bytes(id);
      ASSERT_EQ(bad_joined, bad);
      size_t offset = 0, holder = 0;
      for (; holder < bad_ids.size(); ++holder) {
        const size_t len = f->tokenizer->token_bytes(bad_ids[holder]).size();
        if (offset + len > rejected) break;
        offset += len;
      }
      ASSERT_LT(holder, bad_ids.size());
      ASSERT_EQ(first_refused_token(c, bad_ids), holder)
          << name << ": " << bad << " rejected at byte " << rejected << " token "
          << f->tokenizer->token_bytes(bad_ids[holder]);
    }
    const TokenConstraintStats stats = c->stats();
    std::printf("%s schema %d: %lld masks, %lld walks, %.0f nodes per walk\n", name.c_str(),
                static_cast<int>(schema_index), static_cast<long long>(stats.mask_requests),
                static_cast<long long>(stats.mask_walks),
                static_cast<double>(stats.nodes_visited) / std::max<int64_t>(stats.mask_walks, 1));
  }
  std::printf("%s: %d documents, %d mutations rejected, %d mutations still valid\n", name.c_str(),
              n_docs, n_rejected, n_accepted_mutations);
  EXPECT_GT(n_rejected, n_docs / 2);
}

// 250 documents per schema and tokenizer (2000 in all) keep the test at a
// few seconds; SPECSTACK_GRAMMAR_PROPERTY_DOCS=1250 runs the issue's 10k.
int docs_per_schema() {
  const char* env = std::getenv("SPECSTACK_GRAMMAR_PROPERTY_DOCS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 250;
}

TEST(TokenConstraintProperty, Llama3) {
  run_property("llama3", docs_per_schema());
}
TEST(TokenConstraintProperty, Qwen3) {
  run_property("qwen3", docs_per_schema());
}
// The same with a mask cache of two masks (every state's mask made again
// almost every time, grammar/mask_cache.h) and with none: masks do not
// depend on what was cached.
TEST(TokenConstraintProperty, Llama3TinyMaskCache) {
  TokenConstraintOptions options;
  options.mask_cache_bytes = 2 * (19 << 10);
  run_property("llama3", 40, options);
}
TEST(TokenConstraintProperty, Qwen3NoMaskCache) {
  TokenConstraintOptions options;
  options.mask_cache_bytes = 0;
  run_property("qwen3", 40, options);
}

// The trie walk agrees with brute force at states of a real document.
TEST(TokenConstraintProperty, WalkEqualsBruteForceOnQwen3) {
  const Family* f = family("qwen3");
  ASSERT_NE(f, nullptr);
  const Json schema = Json::parse(kSchemas[0]);
  auto c = std::make_shared<TokenConstraint>(schema_grammar(schema), f->vocabulary);
  const std::string text = R"({"name": "Zoë \"Z\"", "age": -12, "tags": ["x"], "ok": true})";
  TokenMatcher m(c);
  const std::vector<int32_t> ids = f->tokenizer->encode(text, false);
  ASSERT_GT(ids.size(), 12u);
  for (int32_t id : std::span(ids).first(12)) {  // brute force is slow: the first 12 states
    ASSERT_EQ(m.mask().words, brute_force_mask(m.matcher(), *f->vocabulary).words)
        << f->tokenizer->token_bytes(id);
    ASSERT_TRUE(m.accept(id, {}));
  }
}

// The context-independent split (grammar/trie_walk.h) on a grammar whose
// rules return into different contexts ("]" closes an item inside a list or
// inside a bracket, "," continues only a list), with tokens that cross those
// returns: at every state of random walks, the split mask equals brute force.
TEST(TokenConstraint, SplitMaskMatchesBruteForceAcrossRuleReturns) {
  auto g = grammar_of(R"g(root ::= "[" item ("," item)* "]"
item ::= "a" | "b" item | "[" item "]" | "(" item ")"?)g");
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "[",   "]",  ",",  "a",  "b",  "(",  ")",   "a]", "a,",   "]]", "],", "],[",
      "a]]", "ba", "b[", "[a", "[[", "a)", "a),", ")]", "a]),", "x",  "]x", ",a"});
  auto plain = std::make_shared<TokenConstraint>(g, v, TokenConstraintOptions{false});
  for (size_t depth : {1, 2, 3}) {
    TokenConstraintOptions options;
    options.context_depth = depth;
    auto split = std::make_shared<TokenConstraint>(g, v, options);
    std::mt19937 rng(5);
    int states = 0;
    for (int walk = 0; walk < 200; ++walk) {
      TokenMatcher m(split);
      for (int step = 0; step < 12; ++step, ++states) {
        const TokenMask expected = brute_force_mask(m.matcher(), *v);
        ASSERT_EQ(m.mask().words, expected.words)
            << "depth " << depth << " walk " << walk << " step " << step;
        ASSERT_EQ(plain->mask(m.matcher().stacks())->words, expected.words);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v->size(); ++id) {
          if (expected.test(id)) allowed.push_back(id);
        }
        if (allowed.empty()) break;
        ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()], {}));
      }
    }
    EXPECT_GT(states, 1000);
    EXPECT_GT(split->stats().positions_classified, 0);
  }
}

// The split and the plain walk agree at every state of real documents on
// both real vocabularies (the property tests above compare with brute force
// at fewer states, which is slow at 128-152K tokens).
TEST(TokenConstraintProperty, SplitEqualsPlainWalkAtEveryState) {
  for (const char* name : {"llama3", "qwen3"}) {
    const Family* f = family(name);
    ASSERT_NE(f, nullptr);
    for (size_t schema_index = 0; schema_index < std::size(kSchemas); ++schema_index) {
      const Json schema = Json::parse(kSchemas[schema_index]);
      auto g = schema_grammar(schema);
      auto split = std::make_shared<TokenConstraint>(g, f->vocabulary);
      auto plain =
          std::make_shared<TokenConstraint>(g, f->vocabulary, TokenConstraintOptions{false});
      testing::JsonGenerator gen(schema, 7 + schema_index);
      for (int i = 0; i < 3; ++i) {
        const std::vector<int32_t> ids = f->tokenizer->encode(gen.serialize(gen.generate()), false);
        TokenMatcher m(split);
        for (int32_t id : ids) {
          ASSERT_EQ(m.mask().words, plain->mask(m.matcher().stacks())->words)
              << name << " schema " << schema_index;
          ASSERT_TRUE(m.accept(id, {}));
        }
      }
    }
  }
}

// The tops classified when a schema's grammar is compiled
// (TokenConstraint::precompute) are every top that real documents of the
// property schemas meet (recursive ones included, within the search's
// limits), and the masks are those of the lazy split.
TEST(TokenConstraintProperty, CompiledTopsCoverRealDocuments) {
  const Family* f = family("llama3");
  ASSERT_NE(f, nullptr);
  for (size_t schema_index = 0; schema_index < std::size(kSchemas); ++schema_index) {
    const Json schema = Json::parse(kSchemas[schema_index]);
    auto g = schema_grammar(schema);
    auto compiled = std::make_shared<TokenConstraint>(g, f->vocabulary);
    PrecomputeOptions precompute;
    precompute.counts = schema_index == 0;  // the slower option once
    EXPECT_GT(compiled->precompute(precompute), 0u);
    const int64_t classified = compiled->stats().positions_classified;
    auto lazy = std::make_shared<TokenConstraint>(g, f->vocabulary);
    testing::JsonGenerator gen(schema, 3 + schema_index);
    for (int i = 0; i < 5; ++i) {
      const std::vector<int32_t> ids = f->tokenizer->encode(gen.serialize(gen.generate()), false);
      TokenMatcher m(compiled);
      for (int32_t id : ids) {
        ASSERT_EQ(m.mask().words, lazy->mask(m.matcher().stacks())->words) << schema_index;
        ASSERT_TRUE(m.accept(id, {}));
      }
    }
    EXPECT_EQ(compiled->stats().positions_classified, classified) << "schema " << schema_index;
  }
}

}  // namespace
}  // namespace specstack::grammar

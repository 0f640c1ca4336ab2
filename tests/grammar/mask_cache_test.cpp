#include "grammar/mask_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "base/check.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_generator.h"
#include "grammar/json_schema.h"
#include "grammar/real_vocabulary.h"
#include "grammar/token_constraint.h"

namespace specstack::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Masks of 64 words (4096 tokens); keys of 8 bytes, so every entry counts the same.
std::shared_ptr<const TokenMask> mask_of(uint64_t fill) {
  auto m = std::make_shared<TokenMask>();
  m->words.assign(64, fill);
  return m;
}
std::string key_of(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "k%07d", i);
  return buf;
}
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

size_t one_entry() {
  return MaskCache::entry_bytes(key_of(0), *mask_of(0));
}

TEST(MaskCache, KeepsWithinItsBytes) {
  MaskCache none(0);
  none.insert(key_of(1), mask_of(1), 100);
  EXPECT_EQ(none.find(key_of(1)), nullptr);
  EXPECT_EQ(none.stats().entries, 0u);

  MaskCache cache(10 * one_entry());
  std::mt19937 rng(3);
  for (int i = 0; i < 1000; ++i) {
    cache.insert(key_of(int(rng() % 50)), mask_of(uint64_t(i)), rng() % 1000);
    ASSERT_LE(cache.stats().bytes, cache.max_bytes());
    ASSERT_LE(cache.stats().entries, 10u);
  }
  EXPECT_EQ(cache.stats().entries, 10u);
  EXPECT_EQ(cache.stats().bytes, 10 * one_entry());
  EXPECT_GT(cache.stats().evictions, 0);

  // A mask larger than the whole cache is not kept (and evicts nothing).
  MaskCache small(one_entry());
  small.insert(key_of(1), mask_of(1), 1);
  auto big = std::make_shared<TokenMask>();
  big->words.assign(1000, 0);
  small.insert(key_of(2), big, 1'000'000);
  EXPECT_EQ(small.find(key_of(2)), nullptr);
  EXPECT_NE(small.find(key_of(1)), nullptr);
}

TEST(MaskCache, ReplacingAKeyKeepsOneEntry) {
  MaskCache cache(3 * one_entry());
  cache.insert(key_of(1), mask_of(1), 5);
  cache.insert(key_of(1), mask_of(2), 7);
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().bytes, one_entry());
  EXPECT_EQ(cache.find(key_of(1))->words[0], 2u);
}

// Equal costs: least recently used goes first.
TEST(MaskCache, EqualCostsEvictTheLeastRecentlyUsed) {
  MaskCache cache(3 * one_entry());
  cache.insert(key_of(1), mask_of(1), 10);
  cache.insert(key_of(2), mask_of(2), 10);
  cache.insert(key_of(3), mask_of(3), 10);
  ASSERT_NE(cache.find(key_of(1)), nullptr);  // 2 is now the least recent
  cache.insert(key_of(4), mask_of(4), 10);
  EXPECT_EQ(cache.find(key_of(2)), nullptr);
  EXPECT_NE(cache.find(key_of(1)), nullptr);
  EXPECT_NE(cache.find(key_of(3)), nullptr);
  EXPECT_NE(cache.find(key_of(4)), nullptr);
}

// Among entries used since the last eviction, the cheapest goes first.
TEST(MaskCache, TheCheapestGoesFirst) {
  MaskCache cache(3 * one_entry());
  cache.insert(key_of(1), mask_of(1), 100);
  cache.insert(key_of(2), mask_of(2), 1);
  cache.insert(key_of(3), mask_of(3), 50);
  cache.insert(key_of(4), mask_of(4), 10);  // evicts 2 (priority 1); L = 1
  EXPECT_EQ(cache.find(key_of(2)), nullptr);
  cache.insert(key_of(5), mask_of(5), 5);  // 1: 101, 3: 51, 4: 11 -> evicts 4; L = 11
  EXPECT_EQ(cache.find(key_of(4)), nullptr);
  EXPECT_NE(cache.find(key_of(1)), nullptr);
  EXPECT_NE(cache.find(key_of(3)), nullptr);
  EXPECT_NE(cache.find(key_of(5)), nullptr);
  EXPECT_EQ(cache.stats().evictions, 2);
}

// The production case: one expensive entry that every document meets, and
// a stream of cheap ones met once each (the characters of a long string).
// The expensive one outlives many times the cache's size in cheap ones; with
// clear-when-full or plain LRU it would be lost every `capacity` inserts.
// Unused, it is aged out once the cheap ones' priorities pass its own.
TEST(MaskCache, AnExpensiveEntryOutlivesCheapOnesUntilItAges) {
  MaskCache cache(4 * one_entry());
  cache.insert(key_of(0), mask_of(0), 1000);
  int hits = 0;
  for (int i = 1; i <= 400; ++i) {
    cache.insert(key_of(i), mask_of(uint64_t(i)), 3);
    if (i % 20 == 0) hits += cache.find(key_of(0)) != nullptr;  // every "document"
  }
  EXPECT_EQ(hits, 20);
  // No more uses: L rises by ~1 per insert (each cheap entry goes 3 inserts
  // after it came, at L + 3), past the expensive one's ~1400 within 3000.
  for (int i = 401; i <= 3400; ++i) cache.insert(key_of(i), mask_of(uint64_t(i)), 3);
  EXPECT_EQ(cache.find(key_of(0)), nullptr);
}

// The same inputs give the same cache: no clock, no addresses in the policy.
TEST(MaskCache, IsDeterministic) {
  auto play = [] {
    MaskCache cache(16 * one_entry());
    std::mt19937 rng(9);
    std::vector<int> present;
    for (int i = 0; i < 2000; ++i) {
      const int k = int(rng() % 100);
      if (!cache.find(key_of(k))) cache.insert(key_of(k), mask_of(uint64_t(k)), 1 + rng() % 500);
    }
    for (int k = 0; k < 100; ++k) {
      if (cache.find(key_of(k))) present.push_back(k);
    }
    return std::make_pair(present, cache.stats().evictions);
  };
  EXPECT_EQ(play(), play());
}

// TokenConstraint on the real vocabularies and long documents: a schema whose
// documents make more states than a small cache holds (a long string, short
// strings near their maximum, a counted array). Masks with no cache, a tiny
// one and an unbounded one are equal at every state of every
// document, and equal brute force at sampled states. The cached ones share
// a mask between the states whose counters are all far from their bounds
// (TokenConstraintOptions::class_count_keys: the text's characters more than
// a longest token from its maximum); the one without the cache, and one
// keyed by real counts, check that sharing. (A long minimum is left to the
// small-vocabulary test above: its counts near the minimum are classified
// on first use, ~50 ms each at these vocabularies, per constraint.)

// The class-count key on a small vocabulary (longest token 4 bytes): counts
// of [a-c]{30,40} at least 4 below the minimum share one mask, as do those
// past it and at least 4 below the maximum; every mask equals brute force
// and the real-count-keyed cache's.
TEST(MaskCacheProperty, ClassCountKeysShareOnlyExactMasks) {
  auto parsed = parse_gbnf(R"g(root ::= "<" [a-c]{30,40} ">")g");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  auto g = std::make_shared<const Grammar>(std::move(parsed).value());
  auto v = std::make_shared<const TokenVocabulary>(std::vector<std::string>{
      "<", ">", "a", "b", "c", "ab", "ca", "abc", "cab>", "a>", "bc>", "<a", "<abc", "cc", "bbbb"});
  auto shared = std::make_shared<TokenConstraint>(g, v);
  TokenConstraintOptions real_counts;
  real_counts.class_count_keys = false;
  auto exact = std::make_shared<TokenConstraint>(g, v, real_counts);
  std::mt19937 rng(17);
  int states = 0;
  for (int walk = 0; walk < 300; ++walk) {
    TokenMatcher m(shared);
    for (int step = 0; step < 60; ++step, ++states) {
      const TokenMask expected = brute_force_mask(m.matcher(), *v);
      ASSERT_EQ(m.mask().words, expected.words) << "walk " << walk << " step " << step;
      ASSERT_EQ(exact->mask(m.matcher().stacks())->words, expected.words);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < v->size(); ++id) {
        if (expected.test(id)) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      ASSERT_TRUE(m.accept(allowed[rng() % allowed.size()], {}));
    }
  }
  EXPECT_GT(states, 3000);
  // Real counts: the start, one state after each of 0-40 characters, the
  // end (43). The counter holds the iterations begun, c = characters + 1
  // inside the body. Class keys: the start; c 1-27 (one key: at least 4
  // below the minimum); c 28; c 29; c 30 (may stop after this body); c
  // 31-37 (one key: may stop now or after, at least 4 below the maximum);
  // c 38; c 39; c 40; 40 characters (only ">"); the end (11).
  EXPECT_EQ(exact->stats().mask_walks, 43);
  EXPECT_EQ(shared->stats().mask_walks, 11);
}

TEST(MaskCacheProperty, MasksDoNotDependOnTheCacheOnLongDocuments) {
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "text":{"type":"string","maxLength":500},
      "ids":{"type":"array","items":{"type":"integer"},"minItems":6,"maxItems":12},
      "tags":{"type":"array","items":{"type":"string","minLength":3,"maxLength":20},"minItems":2}},
      "required":["text","ids","tags"]})");
  auto text = json_schema_to_gbnf(schema);
  ASSERT_TRUE(text.ok()) << text.message();
  auto parsed = parse_gbnf(*text);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  auto g = std::make_shared<const Grammar>(std::move(parsed).value());
  for (const char* name : {"llama3", "qwen3"}) {
    const testing::Family* f = testing::family(name);
    ASSERT_NE(f, nullptr);
    const size_t mask_bytes = (static_cast<size_t>(f->vocabulary->size()) + 63) / 64 * 8;
    std::vector<std::shared_ptr<TokenConstraint>> constraints;
    for (size_t bytes : {size_t{0}, 3 * mask_bytes, ~size_t{0}}) {
      TokenConstraintOptions options;
      options.mask_cache_bytes = bytes;
      constraints.push_back(std::make_shared<TokenConstraint>(g, f->vocabulary, options));
    }
    TokenConstraintOptions real_counts;
    real_counts.mask_cache_bytes = ~size_t{0};
    real_counts.class_count_keys = false;
    constraints.push_back(std::make_shared<TokenConstraint>(g, f->vocabulary, real_counts));
    constraints[1]->precompute();  // compiled or not: the same masks
    testing::JsonGenerator gen(schema, 21);
    std::set<std::string> states;
    int brute_forced = 0, token = 0;
    for (int doc = 0; doc < 2; ++doc) {
      const std::vector<int32_t> ids = f->tokenizer->encode(gen.serialize(gen.generate()), false);
      // The reference: the unbounded cache keyed by real counts (each state
      // made once). No cache and the tiny one make most masks again at every
      // token, near-maximum walks included (~2 ms each): the first document.
      TokenMatcher m(constraints[3]);
      for (int32_t id : ids) {
        states.insert(m.matcher().stacks().key());
        const TokenMask& reference = m.mask();
        for (size_t i = doc == 0 ? 0 : 2; i < 3; ++i) {
          ASSERT_EQ(constraints[i]->mask(m.matcher().stacks())->words, reference.words)
              << name << " cache " << i << " document " << doc << " token " << token;
        }
        if (token++ % 211 == 40) {  // brute force is slow at 128-152K tokens
          ASSERT_EQ(reference.words, brute_force_mask(m.matcher(), *f->vocabulary).words)
              << name << " document " << doc << " token " << token;
          ++brute_forced;
        }
        ASSERT_TRUE(m.accept(id, {}));
      }
      ASSERT_TRUE(m.can_end());
    }
    EXPECT_GE(brute_forced, 2);
    // The bounded caches turned over; the unbounded one keyed by real counts
    // made each state once, the one keyed by class counts fewer.
    EXPECT_EQ(constraints[0]->stats().cached_masks, 0u);
    EXPECT_GT(constraints[1]->stats().mask_evictions, 0);
    EXPECT_LE(constraints[1]->stats().cached_mask_bytes, 3 * mask_bytes);
    EXPECT_EQ(constraints[2]->stats().mask_evictions, 0);
    EXPECT_EQ(constraints[3]->stats().mask_walks, static_cast<int64_t>(states.size()));
    EXPECT_LT(constraints[2]->stats().mask_walks + 100, static_cast<int64_t>(states.size()));
    EXPECT_GT(states.size(), 100u) << name;
  }
}

}  // namespace
}  // namespace specstack::grammar

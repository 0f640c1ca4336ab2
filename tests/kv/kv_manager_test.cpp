// KvManager scripted scenarios (in the spirit of vLLM's test_prefix_caching):
// exact block ids, free-queue order, eviction order, fork / copy-on-write
// contents, rollback and counters. Block size 4 throughout.
#include "kv/kv_manager.h"

#include <gtest/gtest.h>

#include <numeric>

#include "kv/kv_test_util.h"

namespace specstack {
namespace {

using testing::Ids;
using testing::read_slots;
using testing::write_slots;

Ids iota_ids(int32_t first, int32_t n) {
  Ids ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class KvManagerTest : public ::testing::Test {
 protected:
  void make(int64_t n_blocks) {
    cache_ = std::make_unique<KvCache>(testing::small_kv_shape(n_blocks));
    kv_ = std::make_unique<KvManager>(*cache_);
  }

  // Admits `prompt` like a scheduler: prefix lookup, allocate, compute the
  // uncached rest, publish. Fails the test if it does not fit.
  KvSequence admit(const Ids& prompt, const KvSequenceOptions& options = {}) {
    KvSequence seq = kv_->new_sequence(options);
    const CachedPrefix prefix = kv_->find_cached_prefix(prompt, options.extra_key);
    const auto n_new = static_cast<int32_t>(prompt.size()) - prefix.n_tokens;
    EXPECT_TRUE(kv_->can_allocate(seq, prefix, n_new));
    const int32_t first = kv_->allocate(seq, prefix, n_new);
    EXPECT_EQ(first, prefix.n_tokens);
    write_slots(*cache_, seq, first, Ids(prompt.begin() + first, prompt.end()));
    kv_->publish(seq, prompt);
    return seq;
  }

  const BlockPool& pool() const { return kv_->pool(); }

  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvManager> kv_;
};

TEST_F(KvManagerTest, RerequestingAPromptHitsTheSameBlocks) {
  make(10);
  const Ids prompt = iota_ids(1, 10);  // 2 full blocks + 2 tokens
  KvSequence a = kv_->new_sequence();
  CachedPrefix miss = kv_->find_cached_prefix(prompt, 0);
  EXPECT_EQ(miss.n_tokens, 0);
  EXPECT_TRUE(miss.blocks.empty());
  ASSERT_TRUE(kv_->can_allocate(a, miss, 10));
  EXPECT_EQ(kv_->allocate(a, miss, 10), 0);
  EXPECT_EQ(a.blocks(), (Ids{0, 1, 2}));
  write_slots(*cache_, a, 0, prompt);
  EXPECT_EQ(kv_->publish(a, prompt), 2);  // the partial block 2 is not cached
  EXPECT_EQ(pool().n_cached(), 2);
  EXPECT_EQ(pool().block_hash(2), std::nullopt);
  kv_->free(a);
  // Tail block freed first: the uncached partial block 2 to the head, then
  // cached 1 and 0 to the tail.
  EXPECT_EQ(pool().free_queue(), (Ids{2, 3, 4, 5, 6, 7, 8, 9, 1, 0}));

  KvSequence b = kv_->new_sequence();
  const CachedPrefix hit = kv_->find_cached_prefix(prompt, 0);
  EXPECT_EQ(hit.n_tokens, 8);
  EXPECT_EQ(hit.blocks, (Ids{0, 1}));
  ASSERT_TRUE(kv_->can_allocate(b, hit, 2));
  EXPECT_EQ(kv_->allocate(b, hit, 2), 8);
  EXPECT_EQ(b.blocks(), (Ids{0, 1, 2}));  // the uncached block is reused first
  EXPECT_EQ(b.n_slots(), 10);
  EXPECT_EQ(pool().ref_count(0), 1);
  EXPECT_EQ(pool().free_queue(), (Ids{3, 4, 5, 6, 7, 8, 9}));
  write_slots(*cache_, b, 8, {9, 10});
  EXPECT_EQ(read_slots(*cache_, b), prompt);  // the reused blocks hold the prompt
  EXPECT_EQ(kv_->publish(b, prompt), 0);

  // Decoding two more tokens completes block 2, which gets published.
  ASSERT_TRUE(kv_->can_append(b, 2));
  EXPECT_EQ(kv_->append(b, 2), 10);
  write_slots(*cache_, b, 10, {11, 12});
  EXPECT_EQ(kv_->publish(b, iota_ids(1, 12)), 1);
  EXPECT_EQ(pool().n_cached(), 3);
  EXPECT_EQ(pool().prefix_stats().n_query_tokens, 20);
  EXPECT_EQ(pool().prefix_stats().n_hit_tokens, 8);
  EXPECT_EQ(pool().prefix_stats().n_evictions, 0);
}

TEST_F(KvManagerTest, AHitNeverCoversTheWholePrompt) {
  make(10);
  KvSequence a = admit(iota_ids(1, 8));  // exactly two full blocks
  EXPECT_EQ(pool().n_cached(), 2);
  EXPECT_EQ(kv_->find_cached_prefix(iota_ids(1, 8), 0).blocks, (Ids{0}));
  EXPECT_EQ(kv_->find_cached_prefix(iota_ids(1, 9), 0).blocks, (Ids{0, 1}));
  EXPECT_EQ(kv_->find_cached_prefix(iota_ids(1, 4), 0).n_tokens, 0);
  EXPECT_EQ(kv_->find_cached_prefix(Ids{}, 0).n_tokens, 0);
  EXPECT_EQ(pool().prefix_stats().n_query_tokens, 8 + 8 + 9 + 4);
  EXPECT_EQ(pool().prefix_stats().n_hit_tokens, 4 + 8);
  kv_->free(a);
}

TEST_F(KvManagerTest, SameBlockTokensAfterAnotherPrefixMiss) {
  make(10);
  const Ids a4 = {1, 1, 1, 1}, b4 = {2, 2, 2, 2}, c4 = {3, 3, 3, 3}, d4 = {4, 4, 4, 4};
  KvSequence a = admit(concat(concat(a4, b4), {9}));
  EXPECT_EQ(kv_->find_cached_prefix(concat(concat(c4, b4), {9}), 0).n_tokens, 0);
  EXPECT_EQ(kv_->find_cached_prefix(concat(concat(a4, d4), {9}), 0).blocks, (Ids{0}));
  EXPECT_EQ(kv_->find_cached_prefix(concat(concat(a4, b4), {7}), 0).blocks, (Ids{0, 1}));
  kv_->free(a);
}

TEST_F(KvManagerTest, EvictionFollowsTheFreeOrder) {
  make(4);
  const Ids p = concat(iota_ids(10, 8), {0});  // cached in blocks 0, 1 (+ partial 2)
  const Ids q = concat(iota_ids(20, 8), {0});
  KvSequence a = admit(p);
  EXPECT_EQ(a.blocks(), (Ids{0, 1, 2}));
  kv_->free(a);
  // The uncached partial block 2 at the head, the cached 1 and 0 at the tail.
  EXPECT_EQ(pool().free_queue(), (Ids{2, 3, 1, 0}));
  KvSequence b = admit(q);
  EXPECT_EQ(b.blocks(), (Ids{2, 3, 1}));  // block 1 (p's second) is evicted
  EXPECT_EQ(pool().prefix_stats().n_evictions, 1);
  EXPECT_EQ(kv_->find_cached_prefix(p, 0).blocks, (Ids{0}));
  kv_->free(b);
  // q's partial block 1 to the head, its cached 3 then 2 to the tail.
  EXPECT_EQ(pool().free_queue(), (Ids{1, 0, 3, 2}));

  // Two one-block sequences take block 1 (uncached: no eviction) and then
  // block 0 (p's first block: evicted).
  KvSequence c = admit({50, 51});
  KvSequence d = admit({60, 61});
  EXPECT_EQ(c.blocks(), (Ids{1}));
  EXPECT_EQ(d.blocks(), (Ids{0}));
  EXPECT_EQ(pool().prefix_stats().n_evictions, 2);
  EXPECT_EQ(kv_->find_cached_prefix(p, 0).n_tokens, 0);

  // q's blocks (2, 3) are free but cached: reusing them costs free capacity.
  KvSequence e = kv_->new_sequence();
  const CachedPrefix hit = kv_->find_cached_prefix(q, 0);
  EXPECT_EQ(hit.blocks, (Ids{2, 3}));
  EXPECT_FALSE(kv_->can_allocate(e, hit, 1));  // 1 new + 2 unheld > 2 free
  kv_->free(c);
  ASSERT_TRUE(kv_->can_allocate(e, hit, 1));
  EXPECT_EQ(kv_->allocate(e, hit, 1), 8);
  EXPECT_EQ(e.blocks(), (Ids{2, 3, 1}));
  EXPECT_EQ(pool().n_free(), 0);
  EXPECT_EQ(pool().prefix_stats().n_evictions, 2);  // block 1 was never cached
  kv_->free(d);
  kv_->free(e);
  EXPECT_EQ(pool().n_free(), 4);
}

TEST_F(KvManagerTest, ExtraKeySeparatesHashSpaces) {
  make(10);
  const Ids prompt = iota_ids(1, 9);
  KvSequence dense = admit(prompt);
  EXPECT_EQ(kv_->find_cached_prefix(prompt, 7).n_tokens, 0);
  KvSequence other = admit(prompt, {.extra_key = 7});
  EXPECT_EQ(other.blocks(), (Ids{3, 4, 5}));
  EXPECT_EQ(pool().n_cached(), 4);
  EXPECT_EQ(kv_->find_cached_prefix(prompt, 0).blocks, (Ids{0, 1}));
  EXPECT_EQ(kv_->find_cached_prefix(prompt, 7).blocks, (Ids{3, 4}));
  kv_->free(dense);
  kv_->free(other);
}

TEST_F(KvManagerTest, NonPublishableSequencesAreNeverCached) {
  make(10);
  KvSequence sparse = admit(iota_ids(1, 9), {.publishable = false});
  EXPECT_EQ(sparse.blocks(), (Ids{0, 1, 2}));
  EXPECT_EQ(pool().n_cached(), 0);
  EXPECT_EQ(kv_->find_cached_prefix(iota_ids(1, 9), 0).n_tokens, 0);
  kv_->free(sparse);
}

TEST_F(KvManagerTest, DuplicateContentIsCachedOnce) {
  make(10);
  const Ids prompt = iota_ids(1, 9);
  KvSequence a = kv_->new_sequence();
  KvSequence b = kv_->new_sequence();
  // Both look up before either has published: both compute the prompt.
  const CachedPrefix pa = kv_->find_cached_prefix(prompt, 0);
  const CachedPrefix pb = kv_->find_cached_prefix(prompt, 0);
  kv_->allocate(a, pa, 9);
  kv_->allocate(b, pb, 9);
  EXPECT_EQ(kv_->publish(a, prompt), 2);
  EXPECT_EQ(kv_->publish(b, prompt), 0);
  EXPECT_EQ(b.block_hashes(), a.block_hashes());  // the chain continues all the same
  EXPECT_EQ(kv_->find_cached_prefix(prompt, 0).blocks, (Ids{0, 1}));
  kv_->free(a);
  kv_->free(b);
}

TEST_F(KvManagerTest, ForkSharesBlocksAndCopiesOnlyTheWrittenBlock) {
  make(4);
  KvSequence parent = admit(iota_ids(1, 6));  // blocks 0 (full), 1 (2 of 4 slots)
  KvSequence child = kv_->fork(parent);
  EXPECT_EQ(child.blocks(), (Ids{0, 1}));
  EXPECT_EQ(child.n_slots(), 6);
  EXPECT_EQ(pool().ref_count(0), 2);
  EXPECT_EQ(pool().ref_count(1), 2);
  EXPECT_EQ(pool().n_used(), 2);

  ASSERT_TRUE(kv_->can_append(child, 1));
  EXPECT_EQ(kv_->append(child, 1), 6);
  EXPECT_EQ(child.blocks(), (Ids{0, 2}));  // block 1 copied into 2; block 0 still shared
  EXPECT_EQ(pool().ref_count(0), 2);
  EXPECT_EQ(pool().ref_count(1), 1);
  EXPECT_EQ(pool().ref_count(2), 1);
  // The copy holds every layer's K/V and positions of the written slots.
  const int64_t floats = 4 * 2 * 3;
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t i = 0; i < floats; ++i) {
      EXPECT_EQ(cache_->layer(l).k.f32()[2 * floats + i], cache_->layer(l).k.f32()[1 * floats + i]);
      EXPECT_EQ(cache_->layer(l).v.f32()[2 * floats + i], cache_->layer(l).v.f32()[1 * floats + i]);
    }
  }
  write_slots(*cache_, child, 6, {100});
  EXPECT_EQ(read_slots(*cache_, child), (Ids{1, 2, 3, 4, 5, 6, 100}));

  // The parent is now the sole holder of block 1: it writes in place.
  ASSERT_TRUE(kv_->can_append(parent, 1));
  EXPECT_EQ(kv_->append(parent, 1), 6);
  EXPECT_EQ(parent.blocks(), (Ids{0, 1}));
  EXPECT_EQ(pool().n_used(), 3);
  write_slots(*cache_, parent, 6, {200});
  EXPECT_EQ(read_slots(*cache_, parent), (Ids{1, 2, 3, 4, 5, 6, 200}));
  EXPECT_EQ(read_slots(*cache_, child), (Ids{1, 2, 3, 4, 5, 6, 100}));

  kv_->free(parent);
  EXPECT_EQ(pool().free_queue(), (Ids{1, 3}));  // block 0 is still the child's
  EXPECT_EQ(pool().ref_count(0), 1);
  EXPECT_EQ(read_slots(*cache_, child), (Ids{1, 2, 3, 4, 5, 6, 100}));
  kv_->free(child);
  EXPECT_EQ(pool().free_queue(), (Ids{2, 1, 3, 0}));  // cached block 0 last
}

TEST_F(KvManagerTest, CanAppendCountsTheCopyOnWriteBlock) {
  make(1);
  KvSequence parent = admit({1, 2});
  KvSequence child = kv_->fork(parent);
  EXPECT_FALSE(kv_->can_append(child, 1));  // needs a private copy, none free
  EXPECT_TRUE(kv_->can_append(child, 0));
  kv_->free(parent);
  EXPECT_TRUE(kv_->can_append(child, 2));  // sole holder: writes in place
  EXPECT_EQ(kv_->append(child, 2), 2);
  EXPECT_EQ(child.blocks(), (Ids{0}));
  EXPECT_FALSE(kv_->can_append(child, 1));  // block full, pool empty
  kv_->free(child);
}

TEST_F(KvManagerTest, ASharedFullBlockIsNeverCopied) {
  make(3);
  KvSequence parent = admit(iota_ids(1, 4));
  KvSequence child = kv_->fork(parent);
  ASSERT_TRUE(kv_->can_append(child, 1));
  EXPECT_EQ(kv_->append(child, 1), 4);
  EXPECT_EQ(child.blocks(), (Ids{0, 1}));
  EXPECT_EQ(pool().ref_count(0), 2);
  kv_->free(child);
  kv_->free(parent);
  EXPECT_EQ(pool().free_queue(), (Ids{1, 2, 0}));  // uncached 1 at the head, cached 0 last
}

TEST_F(KvManagerTest, RollbackReleasesBlocksThatBecomeEmpty) {
  make(10);
  KvSequence seq = kv_->new_sequence();
  kv_->allocate(seq, {}, 10);
  EXPECT_EQ(seq.blocks(), (Ids{0, 1, 2}));
  kv_->rollback(seq, 0);
  EXPECT_EQ(seq.n_slots(), 10);
  kv_->rollback(seq, 1);
  EXPECT_EQ(seq.blocks(), (Ids{0, 1, 2}));  // block 2 still holds slot 8
  kv_->rollback(seq, 2);
  EXPECT_EQ(seq.n_slots(), 7);
  EXPECT_EQ(seq.blocks(), (Ids{0, 1}));
  EXPECT_EQ(pool().free_queue(), (Ids{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(kv_->append(seq, 1), 7);  // fills block 1 again, no new block
  EXPECT_EQ(seq.blocks(), (Ids{0, 1}));
  kv_->rollback(seq, 8);
  EXPECT_TRUE(seq.blocks().empty());
  EXPECT_EQ(pool().free_queue(), (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// A sink + window draft drops full blocks from the middle: the gap closes,
// the remaining slots keep their contents (and RoPE positions), the blocks
// return to the pool, and the sequence stops publishing (no longer dense).
TEST_F(KvManagerTest, DropBlocksClosesTheGapAndStopsPublishing) {
  make(10);
  KvSequence seq = kv_->new_sequence();
  const Ids tokens = iota_ids(1, 18);  // 18 tokens: blocks 0..4, the last partial
  kv_->allocate(seq, {}, 18);
  testing::write_slots(*cache_, seq, 0, tokens);
  kv_->publish(seq, tokens);
  EXPECT_EQ(seq.block_hashes().size(), 4u);
  kv_->drop_blocks(seq, 1, 2);  // blocks 1 and 2: tokens 5..12
  EXPECT_EQ(seq.blocks(), (Ids{0, 3, 4}));
  EXPECT_EQ(seq.n_slots(), 10);
  EXPECT_EQ(testing::read_slots(*cache_, seq), (Ids{1, 2, 3, 4, 13, 14, 15, 16, 17, 18}));
  EXPECT_EQ(seq.block_hashes().size(), 1u);
  EXPECT_FALSE(seq.options().publishable);
  // Blocks 1 and 2 were published: they wait, still cached, in the free queue.
  EXPECT_EQ(pool().n_free(), 7);
  EXPECT_EQ(kv_->append(seq, 3), 10);
  EXPECT_EQ(kv_->publish(seq, iota_ids(1, 13)), 0);
  kv_->drop_blocks(seq, 0, 0);  // nothing to drop
  kv_->free(seq);
  EXPECT_EQ(pool().n_free(), 10);
}

TEST_F(KvManagerTest, RollbackIntoAPublishedBlockCopiesBeforeWriting) {
  make(10);
  const Ids prompt = iota_ids(1, 9);
  KvSequence seq = admit(prompt);  // blocks 0, 1 cached; 2 partial
  kv_->rollback(seq, 3);           // back to 6 slots: block 1 partial but cached
  EXPECT_EQ(seq.blocks(), (Ids{0, 1}));
  EXPECT_EQ(seq.block_hashes().size(), 1u);
  ASSERT_TRUE(kv_->can_append(seq, 1));
  EXPECT_EQ(kv_->append(seq, 1), 6);
  EXPECT_EQ(seq.blocks(), (Ids{0, 2}));  // the copy takes the just-freed block 2
  write_slots(*cache_, seq, 6, {77});
  EXPECT_EQ(read_slots(*cache_, seq), (Ids{1, 2, 3, 4, 5, 6, 77}));
  // The cached block kept its content and is still a hit.
  EXPECT_EQ(pool().ref_count(1), 0);
  EXPECT_EQ(kv_->find_cached_prefix(prompt, 0).blocks, (Ids{0, 1}));
  KvSequence again = admit(prompt);
  EXPECT_EQ(read_slots(*cache_, again), prompt);
  EXPECT_EQ(kv_->publish(seq, Ids{1, 2, 3, 4, 5, 6, 77}), 0);  // block 2 not full yet
  kv_->free(seq);
  kv_->free(again);
  EXPECT_EQ(pool().n_free(), 10);
}

TEST_F(KvManagerTest, ExhaustionIsAReturnValue) {
  make(3);
  KvSequence seq = kv_->new_sequence();
  EXPECT_FALSE(kv_->can_allocate(seq, {}, 13));
  EXPECT_TRUE(kv_->can_allocate(seq, {}, 12));
  kv_->allocate(seq, {}, 12);
  EXPECT_FALSE(kv_->can_append(seq, 1));
  EXPECT_TRUE(kv_->can_append(seq, 0));
  KvSequence other = kv_->new_sequence();
  EXPECT_FALSE(kv_->can_allocate(other, {}, 1));
  kv_->free(seq);
  EXPECT_EQ(pool().n_free(), 3);
}

using KvManagerDeathTest = KvManagerTest;

TEST_F(KvManagerDeathTest, AllocateWithAStalePrefixIsACheckFailure) {
  make(3);
  const Ids prompt = iota_ids(1, 5);
  KvSequence a = admit(prompt);
  kv_->free(a);
  const CachedPrefix prefix = kv_->find_cached_prefix(prompt, 0);
  ASSERT_EQ(prefix.blocks, (Ids{0}));
  KvSequence filler = kv_->new_sequence();
  kv_->allocate(filler, {}, 12);  // reuses every block, evicting block 0
  kv_->free(filler);
  KvSequence b = kv_->new_sequence();
  EXPECT_DEATH(kv_->allocate(b, prefix, 1), "stale CachedPrefix");
}

TEST_F(KvManagerDeathTest, MisuseIsACheckFailure) {
  make(2);
  KvSequence seq = kv_->new_sequence();
  EXPECT_DEATH(kv_->allocate(seq, {}, 9), "allocate without can_allocate");
  kv_->allocate(seq, {}, 5);
  EXPECT_DEATH(kv_->append(seq, 4), "append without can_append");
  EXPECT_DEATH(kv_->rollback(seq, 6), "n_tokens <= seq.n_slots()");
  EXPECT_DEATH(kv_->publish(seq, iota_ids(1, 6)), "tokens.size");
  kv_->free(seq);
}

}  // namespace
}  // namespace specstack

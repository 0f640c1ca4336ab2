// BlockPool, FreeBlockQueue, BlockTable and block hashes: exact block ids,
// free-queue order and eviction order for scripted scenarios.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

#include "kv/block_hash.h"
#include "kv/block_table.h"
#include "kv/free_block_queue.h"

namespace specstack {
namespace {

using Ids = std::vector<int32_t>;

BlockContent content_of(const Ids& tokens, uint64_t parent = kRootBlockHash, uint64_t extra = 0) {
  return BlockContent{parent, extra, tokens};
}

TEST(FreeBlockQueue, PushPopRemoveKeepOrder) {
  FreeBlockQueue queue(5);
  EXPECT_EQ(queue.to_vector(), (Ids{0, 1, 2, 3, 4}));
  queue.remove(2);
  queue.remove(0);
  queue.remove(4);
  EXPECT_EQ(queue.to_vector(), (Ids{1, 3}));
  EXPECT_FALSE(queue.contains(2));
  queue.push_back(4);
  queue.push_back(0);
  EXPECT_EQ(queue.to_vector(), (Ids{1, 3, 4, 0}));
  EXPECT_EQ(queue.pop_front(), 1);
  EXPECT_EQ(queue.pop_front(), 3);
  EXPECT_EQ(queue.pop_front(), 4);
  EXPECT_EQ(queue.pop_front(), 0);
  EXPECT_EQ(queue.pop_front(), std::nullopt);
  EXPECT_EQ(queue.size(), 0);
}

TEST(BlockPool, FreshPoolHandsOutAscendingIdsAndReportsExhaustion) {
  BlockPool pool(3);
  EXPECT_TRUE(pool.can_allocate(3));
  EXPECT_FALSE(pool.can_allocate(4));
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.n_free(), 0);
  EXPECT_EQ(pool.n_used(), 3);
  EXPECT_FALSE(pool.can_allocate(1));
  EXPECT_EQ(pool.allocate(), std::nullopt);  // a return value, not a crash
  EXPECT_EQ(pool.allocate(), std::nullopt);
}

TEST(BlockPool, UncachedFreedBlocksJoinTheHeadAndAllocationTakesTheHead) {
  BlockPool pool(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.allocate());
  pool.free(2);
  pool.free(0);
  pool.free(3);
  EXPECT_EQ(pool.free_queue(), (Ids{3, 0, 2}));
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.free_queue(), (Ids{2}));
}

TEST(BlockPool, ScratchBlocksFreedAfterACachedOneAreReusedBeforeItIsEvicted) {
  // A sparse draft drops a cached prompt block, then frees rolled-back
  // scratch blocks: its next appends must take the scratch blocks, not evict
  // the prompt block that a later request could still hit.
  BlockPool pool(3);
  const Ids tokens = {4, 5};  // the content views them: they must outlive it
  const BlockContent content = content_of(tokens);
  const uint64_t hash = hash_block(content);
  const int32_t cached = *pool.allocate();  // 0
  ASSERT_TRUE(pool.register_cached(cached, hash, content));
  const int32_t scratch_a = *pool.allocate();  // 1
  const int32_t scratch_b = *pool.allocate();  // 2
  pool.free(cached);
  pool.free(scratch_a);
  pool.free(scratch_b);
  EXPECT_EQ(pool.free_queue(), (Ids{scratch_b, scratch_a, cached}));
  EXPECT_EQ(pool.allocate(), scratch_b);
  EXPECT_EQ(pool.allocate(), scratch_a);
  EXPECT_EQ(pool.find_cached(hash, content), cached);
  EXPECT_EQ(pool.prefix_stats().n_evictions, 0);
  EXPECT_EQ(pool.allocate(), cached);  // only now is it evicted
  EXPECT_EQ(pool.prefix_stats().n_evictions, 1);
}

TEST(BlockPool, BlockReturnsToTheQueueOnlyAtRefCountZero) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  EXPECT_EQ(pool.ref_count(b), 1);
  pool.touch(b);
  pool.touch(b);
  EXPECT_EQ(pool.ref_count(b), 3);
  pool.free(b);
  pool.free(b);
  EXPECT_EQ(pool.ref_count(b), 1);
  EXPECT_EQ(pool.free_queue(), (Ids{1}));
  pool.free(b);
  EXPECT_EQ(pool.ref_count(b), 0);
  EXPECT_EQ(pool.free_queue(), (Ids{0, 1}));  // uncached: to the head
}

TEST(BlockPool, CachedBlockStaysFindableUntilReallocated) {
  BlockPool pool(2);
  const Ids tokens = {5, 6, 7, 8};
  const BlockContent content = content_of(tokens);
  const uint64_t hash = hash_block(content);
  const int32_t b = *pool.allocate();  // 0
  ASSERT_TRUE(pool.register_cached(b, hash, content));
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_EQ(pool.block_hash(b), hash);
  pool.free(b);
  EXPECT_EQ(pool.free_queue(), (Ids{1, 0}));
  EXPECT_EQ(pool.find_cached(hash, content), b);  // free, but still a hit
  EXPECT_EQ(pool.n_cached(), 1);

  EXPECT_EQ(pool.allocate(), 1);  // head first: the cached block survives
  EXPECT_EQ(pool.find_cached(hash, content), b);
  EXPECT_EQ(pool.prefix_stats().n_evictions, 0);
  EXPECT_EQ(pool.allocate(), 0);  // now it is reused: evicted
  EXPECT_EQ(pool.find_cached(hash, content), std::nullopt);
  EXPECT_EQ(pool.block_hash(0), std::nullopt);
  EXPECT_EQ(pool.n_cached(), 0);
  EXPECT_EQ(pool.prefix_stats().n_evictions, 1);
}

TEST(BlockPool, TouchTakesACachedBlockOutOfTheMiddleOfTheQueue) {
  BlockPool pool(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.allocate());
  const Ids tokens = {1, 2};
  const uint64_t hash = hash_block(content_of(tokens));
  ASSERT_TRUE(pool.register_cached(2, hash, content_of(tokens)));
  for (int32_t b : {0, 2, 3, 1}) pool.free(b);
  // Uncached 0, 3, 1 each went to the head; cached 2 to the tail.
  EXPECT_EQ(pool.free_queue(), (Ids{1, 3, 0, 2}));
  pool.touch(2);
  EXPECT_EQ(pool.ref_count(2), 1);
  EXPECT_EQ(pool.free_queue(), (Ids{1, 3, 0}));
  EXPECT_EQ(pool.n_used(), 1);
  pool.free(2);
  EXPECT_EQ(pool.free_queue(), (Ids{1, 3, 0, 2}));  // most recently used cached block goes last
}

TEST(BlockPool, AHitIsVerifiedAgainstTheStoredContent) {
  BlockPool pool(2);
  const Ids tokens = {1, 2, 3, 4};
  const BlockContent content = content_of(tokens, 11, 22);
  const uint64_t hash = 1234;  // any value: the pool must not trust it alone
  ASSERT_TRUE(pool.register_cached(*pool.allocate(), hash, content));
  EXPECT_EQ(pool.find_cached(hash, content), 0);
  const Ids other_tokens = {1, 2, 3, 5};
  EXPECT_EQ(pool.find_cached(hash, content_of(other_tokens, 11, 22)), std::nullopt);
  EXPECT_EQ(pool.find_cached(hash, content_of(tokens, 12, 22)), std::nullopt);
  EXPECT_EQ(pool.find_cached(hash, content_of(tokens, 11, 23)), std::nullopt);
  const Ids shorter = {1, 2, 3};
  EXPECT_EQ(pool.find_cached(hash, content_of(shorter, 11, 22)), std::nullopt);
  EXPECT_EQ(pool.find_cached(hash + 1, content), std::nullopt);
}

TEST(BlockPool, EachHashIsRegisteredOnce) {
  BlockPool pool(2);
  const Ids tokens = {1, 2};
  const uint64_t hash = hash_block(content_of(tokens));
  const int32_t a = *pool.allocate();
  const int32_t b = *pool.allocate();
  EXPECT_TRUE(pool.register_cached(a, hash, content_of(tokens)));
  EXPECT_FALSE(pool.register_cached(b, hash, content_of(tokens)));
  EXPECT_EQ(pool.block_hash(b), std::nullopt);
  EXPECT_EQ(pool.n_cached(), 1);
  EXPECT_EQ(pool.find_cached(hash, content_of(tokens)), a);
}

TEST(BlockPool, PrefixQueryCounters) {
  BlockPool pool(1);
  pool.record_prefix_query(10, 8);
  pool.record_prefix_query(5, 0);
  EXPECT_EQ(pool.prefix_stats().n_query_tokens, 15);
  EXPECT_EQ(pool.prefix_stats().n_hit_tokens, 8);
}

TEST(BlockPoolDeathTest, DoubleFreeIsACheckFailure) {
  BlockPool pool(2);
  const int32_t b = *pool.allocate();
  pool.free(b);
  EXPECT_DEATH(pool.free(b), "double free");
  EXPECT_DEATH(pool.free(1), "double free");  // never allocated
}

TEST(BlockPoolDeathTest, TouchingAFreeUncachedBlockIsACheckFailure) {
  BlockPool pool(2);
  EXPECT_DEATH(pool.touch(1), "uncached");
  EXPECT_DEATH(pool.touch(7), "block < n_blocks_");
}

TEST(BlockHash, ChainsParentAndSeparatesExtraKeys) {
  const Ids tokens = {3, 1, 4, 1};
  const uint64_t root = hash_block(content_of(tokens));
  EXPECT_EQ(root, hash_block(content_of(tokens)));  // deterministic
  EXPECT_NE(root, hash_block(content_of(tokens, root)));
  EXPECT_NE(root, hash_block(content_of(tokens, kRootBlockHash, 1)));
  const Ids swapped = {1, 3, 4, 1};
  EXPECT_NE(root, hash_block(content_of(swapped)));
  const Ids longer = {3, 1, 4, 1, 5};
  EXPECT_NE(root, hash_block(content_of(longer)));
}

TEST(BlockTable, ReleaseFreesTheLastBlockFirst) {
  BlockPool pool(4);
  BlockTable table(2);
  ASSERT_TRUE(table.can_append(5, pool));
  EXPECT_EQ(table.append(5, pool), 0);
  EXPECT_EQ(table.blocks(), (Ids{0, 1, 2}));
  EXPECT_TRUE(table.last_block_partial());
  EXPECT_EQ(table.n_full_blocks(), 2);
  EXPECT_EQ(table.append(1, pool), 5);  // fills block 2, no new block
  EXPECT_EQ(table.blocks(), (Ids{0, 1, 2}));
  EXPECT_FALSE(table.can_append(3, pool));  // needs 2 blocks, 1 free
  table.release(pool);
  EXPECT_EQ(table.n_slots(), 0);
  // 2, 1, 0 in that order, each (uncached) to the head.
  EXPECT_EQ(pool.free_queue(), (Ids{0, 1, 2, 3}));
}

TEST(BlockTable, TruncateReturnsEmptiedBlocksLastFirst) {
  BlockPool pool(4);
  BlockTable table(2);
  table.append(7, pool);  // blocks 0..3
  EXPECT_EQ(table.truncate(3), (Ids{3, 2}));
  EXPECT_EQ(table.blocks(), (Ids{0, 1}));
  EXPECT_EQ(table.n_slots(), 3);
  EXPECT_EQ(table.truncate(2), (Ids{1}));  // slot 2 was block 1's only filled slot
  EXPECT_EQ(table.blocks(), (Ids{0}));
  EXPECT_EQ(table.truncate(2), Ids{});
  EXPECT_EQ(table.truncate(0), (Ids{0}));
  EXPECT_TRUE(table.blocks().empty());
}

}  // namespace
}  // namespace specstack

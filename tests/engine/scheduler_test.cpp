// Scheduler rules on scripted scenarios with exact expectations: decodes
// first, chunked prefill within the budget, admission by free blocks,
// preemption of the most recently admitted sequence, prefix-cache reuse.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler.h"

namespace specstack {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  void make(int64_t n_blocks, int32_t budget, int32_t max_seqs = 8, bool static_batching = false) {
    KvCacheShape shape{1, n_blocks, 4, 1, 1};
    cache_ = std::make_unique<KvCache>(shape);
    kv_ = std::make_unique<KvManager>(*cache_);
    scheduler_ = std::make_unique<Scheduler>(
        *kv_, SchedulerOptions{budget, max_seqs, /*enable_prefix_caching=*/true, static_batching});
  }
  // A single-choice request whose prompt is `tokens`.
  Sequence* add(std::vector<int32_t> tokens) {
    auto request = std::make_unique<Request>();
    request->stream = std::make_shared<StreamState>();
    auto seq = std::make_unique<Sequence>(kv_->new_sequence());
    seq->request = request.get();
    seq->tokens = std::move(tokens);
    Sequence* raw = seq.get();
    request->sequences.push_back(std::move(seq));
    requests_.push_back(std::move(request));
    scheduler_->add_waiting(raw);
    return raw;
  }
  static std::vector<int32_t> range(int32_t begin, int32_t end) {
    std::vector<int32_t> v(static_cast<size_t>(end - begin));
    std::iota(v.begin(), v.end(), begin);
    return v;
  }
  // Runs schedule + commit, then gives every sequence that wanted logits a new token.
  ScheduleResult step() {
    ScheduleResult result = scheduler_->schedule();
    scheduler_->commit(result);
    for (const auto& chunk : result.chunks) {
      if (chunk.wants_logits) {
        chunk.seq->tokens.push_back(1000 + chunk.seq->n_generated);
        ++chunk.seq->n_generated;
      }
    }
    return result;
  }
  static std::vector<std::pair<Sequence*, int32_t>> counts(const ScheduleResult& r) {
    std::vector<std::pair<Sequence*, int32_t>> out;
    for (const auto& c : r.chunks) out.emplace_back(c.seq, c.count);
    return out;
  }

  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Request>> requests_;
};

using Counts = std::vector<std::pair<Sequence*, int32_t>>;

TEST_F(SchedulerTest, ChunkedPrefillFillsTheBudgetAndDecodesGoFirst) {
  make(/*n_blocks=*/16, /*budget=*/10);
  Sequence* a = add(range(0, 6));
  Sequence* b = add(range(100, 109));
  ScheduleResult r1 = step();
  EXPECT_EQ(counts(r1), (Counts{{a, 6}, {b, 4}}));
  EXPECT_TRUE(r1.chunks[0].wants_logits);
  EXPECT_FALSE(r1.chunks[1].wants_logits);
  // Positions and slots are explicit; only the last row of a finished prompt asks for logits.
  EXPECT_EQ(r1.plan.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3}));
  EXPECT_EQ(r1.plan.slots, r1.plan.positions);
  EXPECT_EQ(r1.plan.seq_index, (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(r1.plan.logit_rows, (std::vector<int32_t>{5}));
  EXPECT_EQ(r1.plan.block_tables[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r1.plan.block_tables[1], (std::vector<int32_t>{2}));

  ScheduleResult r2 = step();  // a decodes (1 token) before b's next chunk (5 tokens)
  EXPECT_EQ(counts(r2), (Counts{{a, 1}, {b, 5}}));
  EXPECT_EQ(r2.plan.token_ids[0], 1000);
  EXPECT_EQ(r2.plan.positions[0], 6);
  EXPECT_EQ(r2.plan.logit_rows, (std::vector<int32_t>{0, 5}));
  ScheduleResult r3 = step();
  EXPECT_EQ(counts(r3), (Counts{{a, 1}, {b, 1}}));
  EXPECT_EQ(scheduler_->n_running(), 2u);
}

TEST_F(SchedulerTest, ALongPromptNeverStallsRunningDecodes) {
  make(64, /*budget=*/4);
  Sequence* a = add(range(0, 3));
  step();  // a prefilled
  Sequence* b = add(range(0, 40));
  for (int i = 0; i < 5; ++i) {
    ScheduleResult r = step();
    ASSERT_EQ(r.chunks.size(), 2u);
    EXPECT_EQ(r.chunks[0].seq, a);  // the decode is in every step
    EXPECT_EQ(r.chunks[0].count, 1);
    EXPECT_EQ(r.chunks[1].seq, b);
    EXPECT_EQ(r.chunks[1].count, 3);
  }
}

TEST_F(SchedulerTest, AdmissionWaitsForBlocksAndMaxSeqs) {
  make(/*n_blocks=*/3, /*budget=*/64, /*max_seqs=*/8);
  Sequence* a = add(range(0, 8));   // 2 blocks
  Sequence* b = add(range(10, 18)); // 2 blocks: does not fit beside a
  ScheduleResult r = step();
  EXPECT_EQ(counts(r), (Counts{{a, 8}}));
  EXPECT_EQ(scheduler_->n_waiting(), 1u);
  scheduler_->remove(a);
  r = step();
  EXPECT_EQ(counts(r), (Counts{{b, 8}}));

  make(64, 64, /*max_seqs=*/1);
  Sequence* c = add(range(0, 2));
  add(range(0, 2));
  r = step();
  EXPECT_EQ(counts(r), (Counts{{c, 2}}));
  EXPECT_EQ(scheduler_->n_waiting(), 1u);
}

TEST_F(SchedulerTest, PoolExhaustionPreemptsTheMostRecentlyAdmitted) {
  make(/*n_blocks=*/4, /*budget=*/64);
  Sequence* a = add(range(0, 7));   // blocks 0,1
  Sequence* b = add(range(20, 27)); // blocks 2,3
  step();  // both prefilled, each with one token generated (8 tokens: fits 2 blocks)
  ScheduleResult r = step();  // decode slot 7 fits in each second block
  EXPECT_EQ(counts(r), (Counts{{a, 1}, {b, 1}}));
  EXPECT_EQ(kv_->pool().n_free(), 0);
  // Now a needs a third block: b (admitted later) is preempted, a proceeds.
  r = step();
  EXPECT_EQ(r.preempted, (std::vector<Sequence*>{b}));
  EXPECT_EQ(counts(r), (Counts{{a, 1}}));
  EXPECT_EQ(b->n_computed, 0);
  EXPECT_FALSE(b->admitted);
  EXPECT_EQ(b->tokens.size(), 9u);  // prompt + 2 generated, kept for recompute
  EXPECT_EQ(scheduler_->n_preemptions(), 1);
  EXPECT_EQ(scheduler_->n_waiting(), 1u);
  // b's blocks were freed last block first, so a's new block evicted b's
  // second block (tokens 4..7) and b's first block (tokens 0..3) stayed cached.
  // When a finishes, b is recomputed from that prefix-cache hit.
  scheduler_->remove(a);
  r = step();
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0].seq, b);
  EXPECT_EQ(r.chunks[0].first, 4);
  EXPECT_EQ(r.chunks[0].count, 5);
  scheduler_->remove(b);
  EXPECT_EQ(kv_->pool().n_free(), 4);
}

TEST_F(SchedulerTest, SelfPreemptionWhenTheOnlyRunningSequenceCannotGrow) {
  make(/*n_blocks=*/2, /*budget=*/64);
  Sequence* a = add(range(0, 8));
  step();  // 8 prompt tokens fill both blocks; one token generated
  ScheduleResult r = step();
  EXPECT_EQ(r.preempted, (std::vector<Sequence*>{a}));
  EXPECT_TRUE(r.chunks.empty());
  EXPECT_EQ(kv_->pool().n_free(), 2);
}

TEST_F(SchedulerTest, PrefixCacheHitSkipsCachedBlocks) {
  make(16, 64);
  Sequence* a = add(range(0, 10));
  step();
  scheduler_->remove(a);
  Sequence* b = add([] {
    auto t = range(0, 8);
    t.push_back(77);
    t.push_back(78);
    return t;
  }());
  ScheduleResult r = step();
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0].first, 8);
  EXPECT_EQ(r.chunks[0].count, 2);
  EXPECT_EQ(b->request->stream->stats.cached_tokens, 8);
  EXPECT_EQ(r.plan.positions, (std::vector<int32_t>{8, 9}));
}

TEST_F(SchedulerTest, StaticBatchingAdmitsOnlyWhileTheBatchForms) {
  make(64, 64, 8, /*static_batching=*/true);
  Sequence* a = add(range(0, 4));
  step();
  Sequence* b = add(range(0, 4));
  ScheduleResult r = step();
  EXPECT_EQ(counts(r), (Counts{{a, 1}}));  // b waits for the batch to drain
  scheduler_->remove(a);
  r = step();
  EXPECT_EQ(counts(r), (Counts{{b, 4}}));
}

}  // namespace
}  // namespace specstack

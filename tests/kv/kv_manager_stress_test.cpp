// Randomized (seeded) KvManager stress test against a reference model: after
// every operation each block's ref_count equals the number of live sequence
// tables holding it, free + used == total, the free queue holds exactly the
// unheld blocks, and every live sequence reads back its own tokens from the
// KvCache (so prefix hits, forks, copy-on-write and rollback never hand a
// sequence someone else's KV).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kv/kv_manager.h"
#include "kv/kv_test_util.h"

namespace specstack {
namespace {

using testing::Ids;
using testing::read_slots;
using testing::write_slots;

struct LiveSequence {
  KvSequence seq;
  Ids tokens;  // the token in each filled slot
};

class Stress {
 public:
  explicit Stress(uint32_t seed)
      : cache_(testing::small_kv_shape(kBlocks)), kv_(cache_), rng_(seed) {
    // Shared prompt stems so lookups hit; tokens from a small alphabet.
    for (int s = 0; s < 3; ++s) {
      Ids stem;
      for (int i = 0; i < 14; ++i) stem.push_back(pick(3));
      stems_.push_back(stem);
    }
  }

  void run(int n_ops) {
    for (int op = 0; op < n_ops; ++op) {
      // Forks need no blocks, so without a cap live sequences pile up and
      // every allocation is refused.
      const int32_t kind = live_.size() >= 8 ? 4 : pick(8);
      switch (kind) {
        case 0:
        case 1:
          admit();
          break;
        case 2:
          append();
          break;
        case 3:
          fork();
          break;
        case 4:
        case 5:
          free_one();
          break;
        case 6:
          rollback();
          break;
        default:
          lookup();
          break;
      }
      check_invariants();
      if (::testing::Test::HasFatalFailure()) return;
    }
    while (!live_.empty()) {
      kv_.free(live_.back().seq);
      live_.pop_back();
    }
    check_invariants();
    EXPECT_EQ(kv_.pool().n_free(), kBlocks);
  }

  int n_admitted = 0, n_appended = 0, n_copied = 0, n_forked = 0, n_rolled_back = 0, n_refused = 0;
  const BlockPool& pool() const { return kv_.pool(); }

 private:
  static constexpr int32_t kBlocks = 16;

  // Modulo of raw mt19937 output: identical on every standard library.
  int32_t pick(uint32_t n) { return static_cast<int32_t>(rng_() % n); }

  Ids random_prompt() {
    const Ids& stem = stems_[static_cast<size_t>(pick(3))];
    Ids prompt(stem.begin(), stem.begin() + pick(15));
    for (int32_t i = 0, n = 1 + pick(6); i < n; ++i) prompt.push_back(pick(3));
    return prompt;
  }

  void admit() {
    const Ids prompt = random_prompt();
    const KvSequenceOptions options{.extra_key = static_cast<uint64_t>(pick(4) == 0),
                                    .publishable = pick(8) != 0};
    KvSequence seq = kv_.new_sequence(options);
    const CachedPrefix prefix = kv_.find_cached_prefix(prompt, options.extra_key);
    const auto n_new = static_cast<int32_t>(prompt.size()) - prefix.n_tokens;
    if (!kv_.can_allocate(seq, prefix, n_new)) {
      ++n_refused;
      return;
    }
    const int32_t first = kv_.allocate(seq, prefix, n_new);
    // The reused prefix must already hold the prompt's tokens.
    Ids held = read_slots(cache_, seq);
    held.resize(static_cast<size_t>(first));
    EXPECT_EQ(held, Ids(prompt.begin(), prompt.begin() + first));
    write_slots(cache_, seq, first, Ids(prompt.begin() + first, prompt.end()));
    kv_.publish(seq, prompt);
    live_.push_back({std::move(seq), prompt});
    ++n_admitted;
  }

  LiveSequence* random_live() {
    if (live_.empty()) return nullptr;
    return &live_[static_cast<size_t>(pick(static_cast<uint32_t>(live_.size())))];
  }

  void append() {
    LiveSequence* s = random_live();
    if (s == nullptr) return;
    const int32_t n = 1 + pick(6);
    if (!kv_.can_append(s->seq, n)) {
      ++n_refused;
      return;
    }
    const Ids before = s->seq.blocks();
    const int32_t first = kv_.append(s->seq, n);
    // Copy-on-write replaces the partial last block; nothing else may change.
    const Ids kept(s->seq.blocks().begin(),
                   s->seq.blocks().begin() + static_cast<std::ptrdiff_t>(before.size()));
    if (kept != before) {
      ++n_copied;
      EXPECT_EQ(Ids(kept.begin(), kept.end() - 1), Ids(before.begin(), before.end() - 1));
    }
    EXPECT_EQ(first, static_cast<int32_t>(s->tokens.size()));
    Ids fresh;
    for (int32_t i = 0; i < n; ++i) fresh.push_back(pick(3));
    write_slots(cache_, s->seq, first, fresh);
    s->tokens.insert(s->tokens.end(), fresh.begin(), fresh.end());
    kv_.publish(s->seq, s->tokens);
    ++n_appended;
  }

  void fork() {
    LiveSequence* s = random_live();
    if (s == nullptr) return;
    KvSequence child = kv_.fork(s->seq);
    Ids tokens = s->tokens;  // copy before push_back may move *s
    live_.push_back({std::move(child), std::move(tokens)});
    ++n_forked;
  }

  void free_one() {
    if (live_.empty()) return;
    const auto index = static_cast<size_t>(pick(static_cast<uint32_t>(live_.size())));
    kv_.free(live_[index].seq);
    live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(index));
  }

  void rollback() {
    LiveSequence* s = random_live();
    if (s == nullptr) return;
    const int32_t n = pick(static_cast<uint32_t>(std::min<size_t>(s->tokens.size(), 6) + 1));
    kv_.rollback(s->seq, n);
    s->tokens.resize(s->tokens.size() - static_cast<size_t>(n));
    ++n_rolled_back;
  }

  void lookup() {
    const Ids prompt = random_prompt();
    const CachedPrefix prefix = kv_.find_cached_prefix(prompt, 0);
    // Every hit block holds exactly the prompt's tokens at that block.
    for (size_t i = 0; i < prefix.blocks.size(); ++i) {
      const int64_t bs = kv_.block_size();
      for (int64_t j = 0; j < bs; ++j) {
        const int64_t index = prefix.blocks[i] * bs + j;
        EXPECT_EQ(cache_.layer(0).positions.data<int32_t>()[index],
                  prompt[static_cast<size_t>(static_cast<int64_t>(i) * bs + j)]);
      }
    }
  }

  void check_invariants() {
    std::vector<int32_t> expected_refs(kBlocks, 0);
    for (const LiveSequence& s : live_) {
      ASSERT_EQ(s.seq.n_slots(), static_cast<int32_t>(s.tokens.size()));
      const auto bs = static_cast<size_t>(kv_.block_size());
      const size_t n_blocks = (s.tokens.size() + bs - 1) / bs;
      ASSERT_EQ(s.seq.blocks().size(), n_blocks);
      ASSERT_LE(s.seq.block_hashes().size(), s.tokens.size() / bs);
      for (int32_t b : s.seq.blocks()) ++expected_refs[static_cast<size_t>(b)];
      ASSERT_EQ(read_slots(cache_, s.seq), s.tokens);
    }
    Ids unheld;
    for (int32_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(pool().ref_count(b), expected_refs[static_cast<size_t>(b)]) << "block " << b;
      if (expected_refs[static_cast<size_t>(b)] == 0) unheld.push_back(b);
    }
    Ids queue = pool().free_queue();
    std::sort(queue.begin(), queue.end());
    ASSERT_EQ(queue, unheld);
    ASSERT_EQ(pool().n_free(), static_cast<int32_t>(unheld.size()));
    ASSERT_EQ(pool().n_free() + pool().n_used(), kBlocks);
    ASSERT_LE(pool().n_cached(), kBlocks);
  }

  KvCache cache_;
  KvManager kv_;
  std::mt19937 rng_;
  std::vector<Ids> stems_;
  std::vector<LiveSequence> live_;
};

TEST(KvManagerStress, RandomOperationsKeepRefCountsAndContents) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    Stress stress(seed);
    stress.run(3000);
    // The run must have exercised every path, not just refused everything.
    EXPECT_GT(stress.n_admitted, 200);
    EXPECT_GT(stress.n_appended, 100);
    EXPECT_GT(stress.n_forked, 100);
    EXPECT_GT(stress.n_rolled_back, 100);
    EXPECT_GT(stress.n_copied, 20);
    EXPECT_GT(stress.n_refused, 20);
    EXPECT_GT(stress.pool().prefix_stats().n_hit_tokens, 0);
    EXPECT_GT(stress.pool().prefix_stats().n_evictions, 0);
  }
}

}  // namespace
}  // namespace specstack

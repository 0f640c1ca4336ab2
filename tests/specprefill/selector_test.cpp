// select_chunks: chunk means, top-k with ties to the lower index, the forced
// chunks (first/last, recent window) added on top of the budget, the
// keep_pct edges and the errors.
#include "specprefill/selector.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace specstack {
namespace {

using Ids = std::vector<int32_t>;

Ids range(int32_t begin, int32_t end) {
  Ids out;
  for (int32_t i = begin; i < end; ++i) out.push_back(i);
  return out;
}

Ids concat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// 10 tokens in chunks of 2 -> 5 chunks with means 0.1, 0.5, 0.3, 0.5, 0.2
// (chunks 1 and 3 tie exactly).
const std::vector<float> kFiveChunks = {0.0f, 0.2f, 0.25f, 0.75f, 0.3f,
                                        0.3f, 0.5f, 0.5f,  0.1f,  0.3f};

TEST(SelectorTest, ChunkScoresAreMeansAndLastChunkMayBeShort) {
  std::vector<float> importance = {1, 2, 3, 4, 5, 6, 7};
  auto s = select_chunks(importance, {.keep_pct = 1.0, .chunk = 3});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(s->chunk_scores, (std::vector<float>{2.0f, 5.0f, 7.0f}));
  EXPECT_EQ(s->kept_positions, range(0, 7));
}

TEST(SelectorTest, TopKBreaksTiesTowardTheLowerChunk) {
  // ceil(0.4 * 5) = 2: chunks 1 and 3 tie at 0.5; 0.2 * 5 = 1 keeps chunk 1.
  auto two = select_chunks(kFiveChunks, {.keep_pct = 0.4, .chunk = 2, .force_first_last = false});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->chunk_scores[1], two->chunk_scores[3]);
  EXPECT_EQ(two->kept_chunks, (Ids{1, 3}));
  EXPECT_EQ(two->kept_positions, (Ids{2, 3, 6, 7}));
  auto one = select_chunks(kFiveChunks, {.keep_pct = 0.2, .chunk = 2, .force_first_last = false});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->kept_chunks, (Ids{1}));
  EXPECT_EQ(one->n_budget_chunks, 1);
}

TEST(SelectorTest, ForcedFirstAndLastAreAddedOnTopOfTheBudget) {
  auto s = select_chunks(kFiveChunks, {.keep_pct = 0.4, .chunk = 2, .force_first_last = true});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_budget_chunks, 2);
  EXPECT_EQ(s->kept_chunks, (Ids{0, 1, 3, 4}));
  EXPECT_EQ(s->kept_positions, concat({range(0, 4), range(6, 10)}));
}

TEST(SelectorTest, TinyKeepStillKeepsFirstAndLast) {
  std::vector<float> importance(1000, 0.0f);
  importance[500] = 1.0f;  // chunk 15 is the only one that matters
  auto s = select_chunks(importance, {.keep_pct = 1e-6});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->n_budget_chunks, 1);  // ceil of a tiny positive fraction is 1
  EXPECT_EQ(s->kept_chunks, (Ids{0, 15, 31}));
  EXPECT_EQ(s->kept_positions, concat({range(0, 32), range(480, 512), range(992, 1000)}));
}

TEST(SelectorTest, KeepAllKeepsEveryToken) {
  std::vector<float> importance(100);
  for (size_t i = 0; i < importance.size(); ++i) importance[i] = std::sin(float(i));
  for (bool force : {false, true}) {
    auto s = select_chunks(importance, {.keep_pct = 1.0, .force_first_last = force});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->kept_chunks, (Ids{0, 1, 2, 3}));
    EXPECT_EQ(s->kept_positions, range(0, 100));
  }
}

TEST(SelectorTest, PromptShorterThanAChunkIsOneChunk) {
  std::vector<float> importance = {0.5f, 0.25f, 0.25f};
  for (double keep : {1e-3, 0.2, 1.0}) {
    auto s = select_chunks(importance, {.keep_pct = keep, .force_first_last = false});
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->chunk_scores.size(), 1u);
    EXPECT_EQ(s->kept_positions, (Ids{0, 1, 2}));
  }
}

TEST(SelectorTest, RecentWindowForcesTheChunksCoveringIt) {
  // W = 5 over 10 tokens: positions 5..9 lie in chunks 2 (4..5), 3 and 4.
  auto s = select_chunks(
      kFiveChunks,
      {.keep_pct = 0.2, .chunk = 2, .force_first_last = false, .force_recent_window = 5});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kept_chunks, (Ids{1, 2, 3, 4}));
  // A window wider than the prompt keeps everything.
  auto all = select_chunks(kFiveChunks, {.keep_pct = 0.2, .chunk = 2, .force_recent_window = 64});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->kept_positions, range(0, 10));
}

TEST(SelectorTest, PositionOffsetShiftsKeptPositions) {
  auto s = select_chunks(
      kFiveChunks,
      {.keep_pct = 0.2, .chunk = 2, .force_first_last = false, .position_offset = 1000});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->kept_chunks, (Ids{1}));  // chunks stay relative to the scored range
  EXPECT_EQ(s->kept_positions, (Ids{1002, 1003}));
}

TEST(SelectorTest, BudgetIsCeilOfTheIntendedProduct) {
  EXPECT_EQ(budget_chunks(0.2, 11), 3);  // 2.2 -> 3
  EXPECT_EQ(budget_chunks(0.3, 10), 3);  // 3.0000000000000004 in binary, still 3
  EXPECT_EQ(budget_chunks(0.5, 3), 2);
  EXPECT_EQ(budget_chunks(1.0, 7), 7);
  EXPECT_EQ(budget_chunks(1e-9, 7), 1);
  EXPECT_EQ(budget_chunks(0.7, 10), 7);  // 7.000000000000001 in binary
}

TEST(SelectorTest, InvalidInputsAreErrors) {
  auto message = [](std::vector<float> importance, SelectionOptions options) {
    auto s = select_chunks(importance, options);
    return s.ok() ? std::string("ok") : s.message();
  };
  const std::vector<float> ok_importance = {0.1f, 0.2f};
  EXPECT_EQ(message(ok_importance, {.keep_pct = 0.0}), "select: keep_pct 0 must be in (0, 1]");
  EXPECT_EQ(message(ok_importance, {.keep_pct = 1.5}), "select: keep_pct 1.5 must be in (0, 1]");
  EXPECT_NE(message(ok_importance, {.keep_pct = NAN}).find("keep_pct nan"), std::string::npos);
  EXPECT_EQ(message(ok_importance, {.chunk = 0}), "select: chunk 0 must be >= 1");
  EXPECT_EQ(message({}, {}), "select: no token importance to select from");
  EXPECT_NE(message(ok_importance, {.force_recent_window = -1}).find("force_recent_window"),
            std::string::npos);
  EXPECT_NE(message(ok_importance, {.position_offset = -3}).find("position_offset"),
            std::string::npos);
  EXPECT_NE(message(ok_importance, {.position_offset = int64_t{1} << 31}).find("int32"),
            std::string::npos);
  EXPECT_EQ(message({0.1f, NAN, 0.3f}, {.chunk = 2}),
            "select: chunk 0 (tokens [0, 2)) has a non-finite score");
}

}  // namespace
}  // namespace specstack

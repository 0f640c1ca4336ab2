// Importance and chunk selection against the golden llama-gqa reference
// (tests/data/golden/README.md "Speculative-prefill importance"): captured
// queries [4 layers, 8 steps, 8 heads, 16] and prompt keys [4, 2, 333, 16]
// from HF transformers, scored by numpy.
//
// Tolerance: every importance / attention value within 1e-5 RELATIVE to the
// reference value (|ours - ref| <= 1e-5 * |ref|); the values are ~1e-3..1e-2,
// so this is far tighter than 1e-5 absolute.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "score_reference.h"
#include "specprefill/scorer.h"
#include "specprefill/selector.h"
#include "test_util.h"

namespace specstack {
namespace {

constexpr int64_t kLayers = 4, kSteps = 8, kHeads = 8, kKvHeads = 2, kTokens = 333, kDim = 16;
constexpr double kRelTolerance = 1e-5;

class GoldenScoreTest : public ::testing::Test {
 protected:
  GoldenScoreTest()
      : ref_(testing::golden_model_dir("llama-gqa") + "/reference.safetensors"),
        keys_data_(ref_.f32("score.keys")),
        keys_(keys_data_.data(), kLayers, kKvHeads, kTokens, kDim) {
    capture_ = AttentionCapture::zeros(kLayers, kSteps, kHeads, kDim);
    capture_.queries = ref_.f32("score.queries");
  }

  static void expect_close(const std::vector<float>& ours, const std::vector<float>& ref) {
    ASSERT_EQ(ours.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_LE(std::fabs(ours[i] - ref[i]), kRelTolerance * std::fabs(ref[i]))
          << "index " << i << ": " << ours[i] << " vs " << ref[i];
    }
  }

  testing::ScoreReference ref_;
  std::vector<float> keys_data_;  // [layers, kv_heads, tokens, dim]
  DensePromptKeys keys_;
  AttentionCapture capture_;
};

TEST_F(GoldenScoreTest, ShapesAreAsDocumented) {
  EXPECT_EQ(ref_.shape("score.queries"), (std::vector<int64_t>{kLayers, kSteps, kHeads, kDim}));
  EXPECT_EQ(ref_.shape("score.keys"), (std::vector<int64_t>{kLayers, kKvHeads, kTokens, kDim}));
}

TEST_F(GoldenScoreTest, PooledImportanceMatches) {
  auto importance = score_tokens(capture_, keys_, ScoreParams{});
  ASSERT_TRUE(importance.ok()) << importance.message();
  expect_close(*importance, ref_.f32("score.importance"));
}

TEST_F(GoldenScoreTest, UnpooledImportanceMatches) {
  auto importance = score_tokens(capture_, keys_, ScoreParams{.pool_kernel = 1});
  ASSERT_TRUE(importance.ok()) << importance.message();
  expect_close(*importance, ref_.f32("score.importance_nopool"));
}

// Each attention row A[layer * H + head, step] alone: one layer, one step, one
// head against that head's kv head, unpooled, is exactly that softmax row.
TEST_F(GoldenScoreTest, AttentionRowsMatch) {
  const std::vector<float> attn = ref_.f32("score.attn");  // [layers * H, steps, tokens]
  const int64_t group = kHeads / kKvHeads;
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int64_t h = 0; h < kHeads; ++h) {
      DensePromptKeys one_head(keys_data_.data() + (l * kKvHeads + h / group) * kTokens * kDim, 1,
                               1, kTokens, kDim);
      for (int64_t t = 0; t < kSteps; ++t) {
        AttentionCapture single = AttentionCapture::zeros(1, 1, 1, kDim);
        const float* q = capture_.query(l, t) + h * kDim;
        std::copy(q, q + kDim, single.queries.begin());
        auto row = score_tokens(single, one_head, ScoreParams{.pool_kernel = 1});
        ASSERT_TRUE(row.ok()) << row.message();
        const float* expected = attn.data() + ((l * kHeads + h) * kSteps + t) * kTokens;
        expect_close(*row, std::vector<float>(expected, expected + kTokens));
      }
    }
  }
}

TEST_F(GoldenScoreTest, ThreadPoolGivesIdenticalResult) {
  auto serial = score_tokens(capture_, keys_, ScoreParams{});
  ThreadPool pool(3);
  auto parallel = score_tokens(capture_, keys_, ScoreParams{.pool = &pool});
  ASSERT_TRUE(serial.ok() && parallel.ok());
  EXPECT_EQ(*serial, *parallel);  // every element is computed in the same order
}

TEST_F(GoldenScoreTest, PureTopKSelectionMatches) {
  auto importance = score_tokens(capture_, keys_, ScoreParams{});
  ASSERT_TRUE(importance.ok());
  auto selection = select_chunks(*importance, SelectionOptions{.force_first_last = false});
  ASSERT_TRUE(selection.ok()) << selection.message();
  expect_close(selection->chunk_scores, ref_.f32("score.chunk_scores"));
  EXPECT_EQ(selection->n_budget_chunks, 3);
  EXPECT_EQ(selection->kept_chunks, ref_.i32("score.kept_chunks"));
  EXPECT_EQ(selection->kept_chunks, (std::vector<int32_t>{0, 2, 7}));
  EXPECT_EQ(selection->kept_positions, ref_.i32("score.kept"));
  EXPECT_EQ(selection->kept_positions.size(), 96u);
}

TEST_F(GoldenScoreTest, ForcedFirstLastIsUnionWithTopK) {
  auto importance = score_tokens(capture_, keys_, ScoreParams{});
  ASSERT_TRUE(importance.ok());
  auto selection = select_chunks(*importance, SelectionOptions{.force_first_last = true});
  ASSERT_TRUE(selection.ok()) << selection.message();
  EXPECT_EQ(selection->kept_chunks, ref_.i32("score.kept_chunks_union_first_last"));
  EXPECT_EQ(selection->kept_chunks, (std::vector<int32_t>{0, 2, 7, 10}));
  // 3 full chunks + the 13-token last chunk (320..332).
  ASSERT_EQ(selection->kept_positions.size(), 96u + 13u);
  EXPECT_EQ(selection->kept_positions.back(), 332);
  EXPECT_EQ(selection->kept_positions[96], 320);
}

}  // namespace
}  // namespace specstack

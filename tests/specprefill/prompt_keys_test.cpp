// PagedPromptKeys reads a sequence's keys through its block table (scattered
// physical blocks, a slot range that starts mid-block after a cached prefix)
// and gives the same scores as the same keys held densely.
#include "specprefill/prompt_keys.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kv/kv_cache.h"
#include "specprefill/scorer.h"

namespace specstack {
namespace {

constexpr int64_t kLayers = 2, kKvHeads = 2, kDim = 4, kBlockSize = 4, kBlocks = 8;

// Distinct value per (layer, kv head, slot, dim) so a misread shows.
float key_value(int64_t layer, int64_t head, int64_t slot, int64_t d) {
  return static_cast<float>(layer * 1000 + head * 100 + slot) + 0.125f * static_cast<float>(d);
}

class PagedPromptKeysTest : public ::testing::Test {
 protected:
  PagedPromptKeysTest() : cache_(KvCacheShape{kLayers, kBlocks, kBlockSize, kKvHeads, kDim}) {
    // Logical blocks 0..4 of the sequence live in scattered physical blocks.
    const int64_t row = kKvHeads * kDim;
    for (int64_t slot = 0; slot < n_slots_; ++slot) {
      const int64_t block = table_[static_cast<size_t>(slot / kBlockSize)];
      const int64_t index = block * kBlockSize + slot % kBlockSize;
      for (int64_t l = 0; l < kLayers; ++l) {
        for (int64_t h = 0; h < kKvHeads; ++h) {
          for (int64_t d = 0; d < kDim; ++d) {
            cache_.layer(l).k.f32()[index * row + h * kDim + d] = key_value(l, h, slot, d);
          }
        }
      }
    }
  }

  KvCache cache_;
  std::vector<int32_t> table_ = {5, 2, 7, 0, 3};
  int64_t n_slots_ = 19;  // the last block is partly filled
};

TEST_F(PagedPromptKeysTest, CopiesKeysOfTheSlotRange) {
  auto keys = PagedPromptKeys::make(cache_, table_, 6, n_slots_);  // cached prefix of 6
  ASSERT_TRUE(keys.ok()) << keys.message();
  EXPECT_EQ(keys->n_tokens(), 13);
  EXPECT_EQ(keys->n_layers(), kLayers);
  EXPECT_EQ(keys->n_kv_heads(), kKvHeads);
  EXPECT_EQ(keys->head_dim(), kDim);
  std::vector<float> out(static_cast<size_t>(13 * kDim));
  keys->copy_keys(1, 1, 0, 13, out.data());
  for (int64_t i = 0; i < 13; ++i) {
    for (int64_t d = 0; d < kDim; ++d) {
      ASSERT_EQ(out[static_cast<size_t>(i * kDim + d)], key_value(1, 1, 6 + i, d)) << i << "," << d;
    }
  }
  keys->copy_keys(0, 0, 5, 7, out.data());
  EXPECT_EQ(out[0], key_value(0, 0, 11, 0));
  EXPECT_EQ(out[kDim + 3], key_value(0, 0, 12, 3));
}

TEST_F(PagedPromptKeysTest, ScoresLikeDenseKeys) {
  std::vector<float> dense;  // [layers, kv_heads, tokens, dim] for slots 6..18
  for (int64_t l = 0; l < kLayers; ++l) {
    for (int64_t h = 0; h < kKvHeads; ++h) {
      for (int64_t slot = 6; slot < n_slots_; ++slot) {
        for (int64_t d = 0; d < kDim; ++d) dense.push_back(key_value(l, h, slot, d) * 1e-3f);
      }
    }
  }
  // Rescale the cache the same way so the softmax is not saturated.
  for (int64_t l = 0; l < kLayers; ++l) {
    float* k = cache_.layer(l).k.f32();
    for (int64_t i = 0; i < cache_.layer(l).k.numel(); ++i) k[i] *= 1e-3f;
  }
  AttentionCapture capture = AttentionCapture::zeros(kLayers, 2, 4, kDim);
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (float& q : capture.queries) q = dist(rng);

  auto paged = PagedPromptKeys::make(cache_, table_, 6, n_slots_);
  ASSERT_TRUE(paged.ok());
  DensePromptKeys dense_view(dense.data(), kLayers, kKvHeads, 13, kDim);
  auto a = score_tokens(capture, *paged, ScoreParams{});
  auto b = score_tokens(capture, dense_view, ScoreParams{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST_F(PagedPromptKeysTest, BadRangesAndBlocksAreErrors) {
  EXPECT_FALSE(PagedPromptKeys::make(cache_, table_, 6, 6).ok());   // empty
  EXPECT_FALSE(PagedPromptKeys::make(cache_, table_, -1, 4).ok());  // negative
  auto past_end = PagedPromptKeys::make(cache_, table_, 0, 21);     // 5 blocks = 20 slots
  ASSERT_FALSE(past_end.ok());
  EXPECT_NE(past_end.message().find("[0, 21)"), std::string::npos) << past_end.message();
  std::vector<int32_t> bad_table = {5, 2, 8};
  auto bad_block = PagedPromptKeys::make(cache_, bad_table, 0, 12);
  ASSERT_FALSE(bad_block.ok());
  EXPECT_NE(bad_block.message().find("block_table[2] = 8"), std::string::npos);
  // Blocks outside the range are not read, so they are not checked either.
  EXPECT_TRUE(PagedPromptKeys::make(cache_, bad_table, 0, 8).ok());
}

}  // namespace
}  // namespace specstack

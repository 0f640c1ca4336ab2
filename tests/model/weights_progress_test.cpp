// The weight-loading progress callback: one call after the embeddings and
// head, then one per layer, with done rising by one up to total.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "test_util.h"

namespace specstack {
namespace {

using Calls = std::vector<std::pair<int64_t, int64_t>>;  // (done, total) in call order

LoadProgress record(Calls& calls) {
  return [&calls](int64_t done, int64_t total) { calls.emplace_back(done, total); };
}

// done = 1, 2, ..., n_layers + 1, all with total = n_layers + 1.
void expect_full_sequence(const Calls& calls, int64_t n_layers) {
  ASSERT_EQ(calls.size(), static_cast<size_t>(n_layers + 1));
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, static_cast<int64_t>(i) + 1) << "call " << i;
    EXPECT_EQ(calls[i].second, n_layers + 1) << "call " << i;
  }
}

Result<ModelConfig> golden_config(const std::string& name) {
  return load_model_config(testing::golden_model_dir(name));
}

TEST(WeightsProgressTest, LoadReportsEveryLayerUpToTotal) {
  for (const char* name : {"tinystories-656k", "qwen3-moe"}) {
    SCOPED_TRACE(name);
    auto config = golden_config(name);
    ASSERT_TRUE(config.ok()) << config.message();
    ASSERT_GT(config->n_layers, 1);
    Calls calls;
    auto weights = load_weights(*config, testing::golden_model_dir(name), record(calls));
    ASSERT_TRUE(weights.ok()) << weights.message();
    expect_full_sequence(calls, config->n_layers);
  }
}

TEST(WeightsProgressTest, DummyWeightsReportTheSameSequence) {
  auto config = golden_config("tinystories-656k");
  ASSERT_TRUE(config.ok()) << config.message();
  Calls calls;
  ModelWeights weights = make_dummy_weights(*config, 7, record(calls));
  EXPECT_EQ(weights.layers.size(), static_cast<size_t>(config->n_layers));
  expect_full_sequence(calls, config->n_layers);
}

TEST(WeightsProgressTest, FailedLoadStopsShortOfTotal) {
  auto config = golden_config("tinystories-656k");
  ASSERT_TRUE(config.ok()) << config.message();
  const int64_t n_stored = config->n_layers;
  config->n_layers = n_stored + 2;  // the file lacks the last two layers
  Calls calls;
  auto weights =
      load_weights(*config, testing::golden_model_dir("tinystories-656k"), record(calls));
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.message().find("model.layers." + std::to_string(n_stored) + "."),
            std::string::npos)
      << weights.message();
  // Every stored layer was reported, then nothing more: the bar never claims done.
  ASSERT_EQ(calls.size(), static_cast<size_t>(n_stored + 1));
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].first, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(calls[i].second, n_stored + 3);
  }
}

TEST(WeightsProgressTest, EmptyCallbackIsAllowed) {
  auto config = golden_config("tinystories-656k");
  ASSERT_TRUE(config.ok()) << config.message();
  auto weights = load_weights(*config, testing::golden_model_dir("tinystories-656k"));
  ASSERT_TRUE(weights.ok()) << weights.message();
  EXPECT_EQ(weights->layers.size(), static_cast<size_t>(config->n_layers));
}

}  // namespace
}  // namespace specstack

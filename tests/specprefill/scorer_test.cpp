// score_tokens: the ALGORITHM.md worked example, a literal double-precision
// re-statement of the formula on random data (GQA, pooling edges, M below the
// pooling width), sliding-window layer skipping, suffix-only scoring after a
// cached prefix, and shape / non-finite errors.
#include "specprefill/scorer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "specprefill/selector.h"

namespace specstack {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// The formula written out plainly, in double. keys: [layers, kv_heads, M, D].
std::vector<double> naive_importance(const AttentionCapture& c, const std::vector<float>& keys,
                                     int64_t n_kv_heads, int64_t m, int64_t kernel) {
  const int64_t group = c.n_heads / n_kv_heads, d_len = c.head_dim, pad = kernel / 2;
  std::vector<double> importance(static_cast<size_t>(m), 0.0);
  for (int64_t t = 0; t < c.n_steps; ++t) {
    std::vector<double> best(static_cast<size_t>(m), 0.0);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      if (c.is_sliding(l)) continue;
      for (int64_t h = 0; h < c.n_heads; ++h) {
        const float* q = c.query(l, t) + h * d_len;
        const float* k = keys.data() + (l * n_kv_heads + h / group) * m * d_len;
        std::vector<double> p(static_cast<size_t>(m));
        double max_logit = -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < m; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < d_len; ++d) dot += double(q[d]) * k[j * d_len + d];
          p[j] = dot / std::sqrt(double(d_len));
          max_logit = std::max(max_logit, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - max_logit));
        for (int64_t j = 0; j < m; ++j) {
          double pooled = 0.0;
          for (int64_t i = j - pad; i <= j + pad; ++i) pooled += (i >= 0 && i < m) ? p[i] / sum : 0;
          best[j] = std::max(best[j], pooled / double(kernel));
        }
      }
    }
    for (int64_t j = 0; j < m; ++j) importance[j] += best[j] / double(c.n_steps);
  }
  return importance;
}

TEST(ScorerTest, WorkedExampleFromAlgorithmDoc) {
  AttentionCapture capture = AttentionCapture::zeros(1, 1, 4, 2);
  capture.queries = {1, 0, 0, 1, 1, 1, 2, 1};          // heads 0..3
  const std::vector<float> keys = {1, 0, 0, 1, 1, 1,   // kv head 0, tokens 0..2
                                   1, 2, 0, 2, 2, 2};  // kv head 1
  DensePromptKeys view(keys.data(), 1, 2, 3, 2);
  auto importance = score_tokens(capture, view, ScoreParams{.pool_kernel = 1});
  ASSERT_TRUE(importance.ok()) << importance.message();
  const std::vector<float> expected = {0.401f, 0.401f, 0.768f};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR((*importance)[i], expected[i], 5e-4) << i;
  // Exactly: heads 0 and 1 give 1 / (2 + e^(-1/sqrt 2)); head 3 gives
  // 1 / (1 + e^(-sqrt 2) + e^(-2 sqrt 2)) at token 2.
  const double a = 1.0 / (2.0 + std::exp(-1.0 / std::sqrt(2.0)));
  const double b = 1.0 / (1.0 + std::exp(-std::sqrt(2.0)) + std::exp(-2.0 * std::sqrt(2.0)));
  EXPECT_NEAR((*importance)[0], a, 1e-6);
  EXPECT_NEAR((*importance)[1], a, 1e-6);
  EXPECT_NEAR((*importance)[2], b, 1e-6);

  // keep 1/2 at token level: ceil(0.5 * 3) = 2 -> [0, 2]; the tie between
  // tokens 0 and 1 goes to the lower index; the last token is kept anyway.
  for (bool force : {false, true}) {
    auto selection = select_chunks(
        *importance, SelectionOptions{.keep_pct = 0.5, .chunk = 1, .force_first_last = force});
    ASSERT_TRUE(selection.ok()) << selection.message();
    EXPECT_EQ(selection->kept_positions, (std::vector<int32_t>{0, 2})) << force;
  }
}

struct RandomCase {
  int64_t layers, steps, heads, kv_heads, tokens, dim, kernel;
  float scale = 1.5f;  // std of queries and keys
  // fp32 logits of magnitude ~100 carry ~1e-5 absolute rounding error, which
  // exp turns into relative error: large logits need a looser bound.
  double rel_tolerance = 1e-5;
};

class ScorerRandomTest : public ::testing::TestWithParam<RandomCase> {};

TEST_P(ScorerRandomTest, MatchesNaiveFormula) {
  const RandomCase c = GetParam();
  AttentionCapture capture = AttentionCapture::zeros(c.layers, c.steps, c.heads, c.dim);
  capture.queries = random_floats(capture.queries.size(), 7, c.scale);
  const auto keys = random_floats(size_t(c.layers * c.kv_heads * c.tokens * c.dim), 8, c.scale);
  DensePromptKeys view(keys.data(), c.layers, c.kv_heads, c.tokens, c.dim);
  auto importance = score_tokens(capture, view, ScoreParams{.pool_kernel = c.kernel});
  ASSERT_TRUE(importance.ok()) << importance.message();
  const auto expected = naive_importance(capture, keys, c.kv_heads, c.tokens, c.kernel);
  for (int64_t j = 0; j < c.tokens; ++j) {
    ASSERT_NEAR((*importance)[j], expected[j], c.rel_tolerance * expected[j] + 1e-9)
        << "token " << j;
  }
  ThreadPool pool(3);
  auto parallel = score_tokens(capture, view, ScoreParams{.pool_kernel = c.kernel, .pool = &pool});
  ASSERT_TRUE(parallel.ok());
  EXPECT_EQ(*parallel, *importance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ScorerRandomTest,
    ::testing::Values(RandomCase{2, 3, 4, 2, 100, 8, 13},     // GQA, pooled, partial last tile
                      RandomCase{1, 1, 3, 3, 5, 4, 13},       // M < kernel: padding both sides
                      RandomCase{3, 2, 6, 1, 37, 5, 3},       // MQA, odd head_dim, 6 rows
                      RandomCase{1, 8, 2, 2, 1, 16, 13},      // a single token: importance 1/13
                      RandomCase{2, 5, 14, 2, 2000, 64, 13},  // parallel shares actually split
                      RandomCase{1, 2, 4, 2, 64, 16, 1},      // no pooling
                      // logits spread over +-100: exp underflows to 0
                      RandomCase{2, 2, 4, 2, 300, 16, 13, 6.0f, 1e-4}));

TEST(ScorerTest, SlidingWindowLayersAreSkipped) {
  const int64_t m = 50, dim = 8;
  AttentionCapture both = AttentionCapture::zeros(2, 2, 4, dim);
  both.queries = random_floats(both.queries.size(), 1, 2.0f);
  both.layer_window = {0, 16};
  const auto keys = random_floats(size_t(2 * 2 * m * dim), 2, 2.0f);
  DensePromptKeys two_layers(keys.data(), 2, 2, m, dim);

  AttentionCapture first = AttentionCapture::zeros(1, 2, 4, dim);
  for (int64_t t = 0; t < 2; ++t) std::copy_n(both.query(0, t), 4 * dim, first.query(0, t));
  DensePromptKeys one_layer(keys.data(), 1, 2, m, dim);

  auto skipped = score_tokens(both, two_layers, ScoreParams{});
  auto reference = score_tokens(first, one_layer, ScoreParams{});
  ASSERT_TRUE(skipped.ok() && reference.ok());
  EXPECT_EQ(*skipped, *reference);
  // Scoring the sliding layer as well changes the result, so the skip is real.
  both.layer_window = {0, 0};
  auto unskipped = score_tokens(both, two_layers, ScoreParams{});
  ASSERT_TRUE(unskipped.ok());
  EXPECT_NE(*unskipped, *reference);

  both.layer_window = {8, 16};
  auto none_left = score_tokens(both, two_layers, ScoreParams{});
  ASSERT_FALSE(none_left.ok());
  EXPECT_NE(none_left.message().find("sliding-window"), std::string::npos);
}

TEST(ScorerTest, CachedPrefixScoresOnlyTheSuffix) {
  const int64_t total = 90, prefix = 40, dim = 8;
  AttentionCapture capture = AttentionCapture::zeros(2, 3, 4, dim);
  capture.queries = random_floats(capture.queries.size(), 3);
  const auto keys = random_floats(size_t(2 * 2 * total * dim), 4);
  DensePromptKeys suffix_view(keys.data(), 2, 2, total, dim, prefix, total);
  ASSERT_EQ(suffix_view.n_tokens(), total - prefix);

  // The same suffix keys copied into a buffer of their own.
  std::vector<float> suffix_keys;
  for (int64_t lh = 0; lh < 2 * 2; ++lh) {
    const float* base = keys.data() + (lh * total + prefix) * dim;
    suffix_keys.insert(suffix_keys.end(), base, base + (total - prefix) * dim);
  }
  DensePromptKeys copied(suffix_keys.data(), 2, 2, total - prefix, dim);
  auto a = score_tokens(capture, suffix_view, ScoreParams{});
  auto b = score_tokens(capture, copied, ScoreParams{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  const auto expected = naive_importance(capture, suffix_keys, 2, total - prefix, 13);
  for (size_t j = 0; j < expected.size(); ++j)
    EXPECT_NEAR((*a)[j], expected[j], 1e-5 * expected[j]);

  // Selected indices come back as positions P + i.
  auto selection =
      select_chunks(*a, SelectionOptions{.keep_pct = 0.5, .chunk = 16, .position_offset = prefix});
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->kept_positions.front(), prefix);    // first suffix chunk forced
  EXPECT_EQ(selection->kept_positions.back(), total - 1);  // last prompt token
  EXPECT_TRUE(std::is_sorted(selection->kept_positions.begin(), selection->kept_positions.end()));
}

TEST(ScorerTest, ShapeMismatchesAreErrors) {
  const auto keys = random_floats(2 * 2 * 10 * 8, 5);
  DensePromptKeys view(keys.data(), 2, 2, 10, 8);
  auto expect_error = [&](const AttentionCapture& capture, ScoreParams params, const char* what) {
    auto result = score_tokens(capture, view, params);
    ASSERT_FALSE(result.ok()) << what;
    EXPECT_NE(result.message().find(what), std::string::npos) << result.message();
  };
  expect_error(AttentionCapture::zeros(3, 1, 4, 8), {}, "layers");
  expect_error(AttentionCapture::zeros(2, 1, 4, 4), {}, "head_dim");
  expect_error(AttentionCapture::zeros(2, 1, 3, 8), {}, "multiple of n_kv_heads");
  expect_error(AttentionCapture::zeros(2, 1, 4, 8), {.pool_kernel = 12}, "pool_kernel 12");
  expect_error(AttentionCapture::zeros(2, 0, 4, 8), {}, "n_steps 0");
  AttentionCapture short_buffer = AttentionCapture::zeros(2, 1, 4, 8);
  short_buffer.queries.pop_back();
  expect_error(short_buffer, {}, "queries holds 63 floats");
}

TEST(ScorerTest, NonFiniteInputsAreErrors) {
  AttentionCapture capture = AttentionCapture::zeros(1, 2, 2, 4);
  capture.queries = random_floats(capture.queries.size(), 6);
  auto keys = random_floats(2 * 20 * 4, 9);
  keys[2 * 4 + 1] = NAN;  // kv head 0, token 2
  DensePromptKeys view(keys.data(), 1, 2, 20, 4);
  auto result = score_tokens(capture, view, ScoreParams{});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("non-finite"), std::string::npos) << result.message();
  keys[2 * 4 + 1] = INFINITY;
  EXPECT_FALSE(score_tokens(capture, view, ScoreParams{}).ok());
}

}  // namespace
}  // namespace specstack

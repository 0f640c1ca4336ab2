#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace specstack {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplingParams seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0.0f;
  return params;
}

std::vector<float> random_logits(size_t vocab, uint64_t seed, float scale = 3.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double max_logit = -kInf;
  for (float logit : logits) max_logit = std::max<double>(max_logit, logit);
  std::vector<double> probs(logits.size());
  double total = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::exp((logits[i] - max_logit) / temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;
  return probs;
}

std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

// Draws n tokens from fresh copies of `logits`; returns counts per token.
std::vector<int> histogram(Sampler& sampler, const std::vector<float>& logits, int n) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    const int32_t token = sampler.sample(row);
    EXPECT_GE(token, 0);
    EXPECT_LT(static_cast<size_t>(token), logits.size());
    ++counts[token];
  }
  return counts;
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double expected = probs[i] * n;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(Sampler, GreedyPicksArgmax) {
  Sampler sampler(greedy(), {});
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.5f};
  EXPECT_EQ(sampler.sample(logits), 1);
}

TEST(Sampler, GreedyTiesGoToLowestId) {
  Sampler sampler(greedy(), {});
  std::vector<float> logits = {1.0f, 3.0f, 0.0f, 3.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits), 1);
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  SamplingParams params = seeded(5);
  params.temperature = 1e-6f;
  Sampler sampler(params, {});
  const std::vector<float> logits = {0.0f, 0.0f, 0.01f, 0.0f};
  for (int i = 0; i < 50; ++i) {
    std::vector<float> row = logits;
    EXPECT_EQ(sampler.sample(row), 2);
  }
}

TEST(Sampler, NaNLogitsAreIgnored) {
  Sampler greedy_sampler(greedy(), {});
  std::vector<float> logits = {kNaN, 1.0f, kNaN, 0.5f};
  EXPECT_EQ(greedy_sampler.sample(logits), 1);

  SamplingParams params = seeded(3);
  params.top_p = 0.9f;
  for (SamplingParams p : {seeded(3), params}) {
    Sampler sampler(p, {});
    const std::vector<float> row = {kNaN, 0.0f, kNaN, 0.0f, kNaN};
    const std::vector<int> counts = histogram(sampler, row, 500);
    EXPECT_EQ(counts[0] + counts[2] + counts[4], 0);
    EXPECT_GT(counts[1], 0);
    EXPECT_GT(counts[3], 0);
  }

  // Nothing usable at all: still a valid id, no crash.
  Sampler sampler(seeded(3), {});
  std::vector<float> all_nan = {kNaN, kNaN, kNaN};
  const int32_t token = sampler.sample(all_nan);
  EXPECT_GE(token, 0);
  EXPECT_LT(token, 3);
}

TEST(Sampler, InfiniteLogitWins) {
  Sampler sampler(seeded(1), {});
  for (int i = 0; i < 20; ++i) {
    std::vector<float> logits = {1.0f, kInf, -kInf, 2.0f};
    EXPECT_EQ(sampler.sample(logits), 1);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  Sampler a(seeded(42), {});
  Sampler b(seeded(42), {});
  for (int step = 0; step < 200; ++step) {
    std::vector<float> la = random_logits(1000, step, 1.0f);
    std::vector<float> lb = la;
    ASSERT_EQ(a.sample(la), b.sample(lb)) << "step " << step;
  }
}

TEST(Sampler, DifferentSeedsDiffer) {
  Sampler a(seeded(1), {});
  Sampler b(seeded(2), {});
  int differences = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<float> la = random_logits(1000, step, 0.5f);
    std::vector<float> lb = la;
    differences += a.sample(la) != b.sample(lb);
  }
  // Near-flat distributions over 1000 tokens: almost every draw differs.
  EXPECT_GT(differences, 150);
}

TEST(Sampler, UnseededSamplersDiffer) {
  Sampler a(SamplingParams{}, {});
  Sampler b(SamplingParams{}, {});
  int differences = 0;
  for (int step = 0; step < 50; ++step) {
    std::vector<float> la(1000, 0.0f);
    std::vector<float> lb = la;
    differences += a.sample(la) != b.sample(lb);
  }
  EXPECT_GT(differences, 0);
}

TEST(Sampler, TopKOneIsGreedy) {
  SamplingParams params = seeded(7);
  params.top_k = 1;
  Sampler sampler(params, {});
  for (int step = 0; step < 100; ++step) {
    std::vector<float> logits = random_logits(5000, 100 + step, 1.0f);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits), argmax);
  }
}

TEST(Sampler, TopKKeepsOnlyTheBest) {
  // Ties straddle the cut: ids 1, 3 and 5 share the 3rd-best logit and only
  // the lowest id may survive top_k = 3.
  const std::vector<float> logits = {5.0f, 2.0f, 6.0f, 2.0f, -1.0f, 2.0f, 1.0f};
  SamplingParams params = seeded(11);
  params.top_k = 3;
  Sampler sampler(params, {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  const std::vector<double> kept = softmax({6.0f, 5.0f, 2.0f});
  const std::vector<double> probs = {kept[1], kept[2], kept[0], 0, 0, 0, 0};
  EXPECT_LT(chi_square(counts, probs, n), 16.3);  // 2 dof, p = 0.0003
}

TEST(Sampler, TopKOnLargeVocab) {
  const std::vector<float> logits = random_logits(150000, 9);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  SamplingParams params = seeded(12);
  params.top_k = 40;
  Sampler sampler(params, {});
  const std::vector<int> counts = histogram(sampler, logits, 300);
  int in_top = 0;
  for (int j = 0; j < 40; ++j) in_top += counts[ids[j]];
  EXPECT_EQ(in_top, 300);
  EXPECT_GT(counts[ids[0]], 0);
}

TEST(Sampler, TinyTopPIsGreedy) {
  SamplingParams params = seeded(8);
  params.top_p = 1e-6f;
  Sampler sampler(params, {});
  for (int step = 0; step < 100; ++step) {
    std::vector<float> logits = random_logits(5000, 200 + step, 1.0f);
    const auto argmax = std::max_element(logits.begin(), logits.end()) - logits.begin();
    EXPECT_EQ(sampler.sample(logits), argmax);
  }
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  // Sorted probabilities 0.5, 0.3, 0.15, 0.05: 0.5 < 0.6 <= 0.8, so {0, 1}.
  const std::vector<float> logits = log_probs({0.15, 0.5, 0.05, 0.3});
  SamplingParams params = seeded(13);
  params.top_p = 0.6f;
  Sampler sampler(params, {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  EXPECT_LT(chi_square(counts, {0, 0.625, 0, 0.375}, n), 13.0);  // 1 dof
}

TEST(Sampler, TopPAppliesAfterTopK) {
  // top_k = 3 leaves 0.5, 0.3, 0.15 -> renormalised 0.526, 0.316, 0.158, so
  // top_p = 0.82 keeps two tokens (0.842 >= 0.82); over the full distribution
  // it would have kept three (0.8 < 0.82).
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplingParams params = seeded(14);
  params.top_k = 3;
  params.top_p = 0.82f;
  Sampler sampler(params, {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  EXPECT_LT(chi_square(counts, {0.625, 0.375, 0, 0}, n), 13.0);
}

TEST(Sampler, TopPWithLargeNucleus) {
  // Slowly decreasing logits: the nucleus holds thousands of tokens, more
  // than the sampler's first guesses, and ids are already in sorted order.
  const size_t vocab = 20000;
  std::vector<float> logits(vocab);
  for (size_t i = 0; i < vocab; ++i) logits[i] = -0.0005f * static_cast<float>(i);
  const std::vector<double> probs = softmax(logits);
  const double top_p = 0.7;
  size_t nucleus = 0;
  for (double cumulative = 0.0; cumulative < top_p;) cumulative += probs[nucleus++];

  SamplingParams params = seeded(15);
  params.top_p = static_cast<float>(top_p);
  Sampler sampler(params, {});
  const std::vector<int> counts = histogram(sampler, logits, 4000);
  int beyond = 0, near_edge = 0;
  for (size_t i = 0; i < vocab; ++i) {
    if (i >= nucleus + 1) beyond += counts[i];  // +1: float vs double at the edge
    if (i + 100 < nucleus && i + 400 >= nucleus) near_edge += counts[i];
  }
  EXPECT_GT(nucleus, 1000u);
  EXPECT_EQ(beyond, 0);
  EXPECT_GT(near_edge, 0);
}

TEST(Sampler, TopPTiesKeepLowestIds) {
  // Ten equal logits: top_p = 0.25 keeps exactly three, the lowest ids.
  SamplingParams params = seeded(20);
  params.top_p = 0.25f;
  Sampler sampler(params, {});
  const int n = 3000;
  const std::vector<int> counts = histogram(sampler, std::vector<float>(10, 0.5f), n);
  EXPECT_LT(chi_square(counts, {1 / 3.0, 1 / 3.0, 1 / 3.0, 0, 0, 0, 0, 0, 0, 0}, n), 13.8);
}

TEST(Sampler, TopPMatchesFullSortReference) {
  const std::vector<float> logits = random_logits(3000, 21, 2.0f);
  const std::vector<double> probs = softmax(logits);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float top_p = 0.8f;
  std::vector<int> rank(logits.size());
  for (size_t r = 0; r < ids.size(); ++r) rank[ids[r]] = static_cast<int>(r);
  size_t nucleus = 0;
  for (double cumulative = 0.0; cumulative < top_p;) cumulative += probs[ids[nucleus++]];

  SamplingParams params = seeded(22);
  params.top_p = top_p;
  Sampler sampler(params, {});
  const int n = 4000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  // Renormalised nucleus probabilities; one token of slack at the edge for
  // float vs double sums.
  std::vector<double> expected(logits.size(), 0.0);
  double kept = 0.0;
  for (size_t r = 0; r < nucleus; ++r) kept += probs[ids[r]];
  for (size_t r = 0; r < nucleus; ++r) expected[ids[r]] = probs[ids[r]] / kept;
  int outside = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    outside += rank[i] > static_cast<int>(nucleus) ? counts[i] : 0;
  EXPECT_EQ(outside, 0);
  // Tokens with a reasonable expectation: counts follow the renormalised
  // nucleus (the many tiny ones are summed into one cell).
  double chi2 = 0.0, small_expected = 0.0;
  int small_observed = 0, cells = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = expected[i] * n;
    if (rank[i] >= static_cast<int>(nucleus)) continue;
    if (e < 10.0) {
      small_expected += e;
      small_observed += counts[i];
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  chi2 += (small_observed - small_expected) * (small_observed - small_expected) / small_expected;
  EXPECT_GT(cells, 10);
  EXPECT_LT(chi2, cells + 6.0 * std::sqrt(2.0 * cells));  // mean + 6 sigma
}

TEST(Sampler, MinPFiltersRelativeToMax) {
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});
  SamplingParams params = seeded(16);
  params.min_p = 0.2f;  // keeps p >= 0.1
  Sampler sampler(params, {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  EXPECT_LT(chi_square(counts, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n), 16.3);

  params.min_p = 0.7f;  // keeps p >= 0.35: only the max
  Sampler strict(params, {});
  EXPECT_EQ(histogram(strict, logits, 200)[0], 200);
}

TEST(Sampler, MinPWithTopK) {
  const std::vector<float> logits = log_probs({0.4, 0.3, 0.2, 0.06, 0.04});
  SamplingParams params = seeded(17);
  params.top_k = 4;
  params.min_p = 0.4f;  // keeps p >= 0.16
  Sampler sampler(params, {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  EXPECT_LT(chi_square(counts, {0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9, 0, 0}, n), 16.3);
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f, -0.5f, 0.2f};
  Sampler sampler(seeded(18), {});
  const int n = 20000;
  const std::vector<int> counts = histogram(sampler, logits, n);
  // 7 degrees of freedom; 24.3 is the p = 0.001 critical value.
  EXPECT_LT(chi_square(counts, softmax(logits), n), 24.3);
  // And the test is able to fail: the counts are far from uniform.
  EXPECT_GT(chi_square(counts, std::vector<double>(8, 1.0 / 8), n), 1000.0);
}

TEST(Sampler, TemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  const int n = 20000;
  SamplingParams params = seeded(19);
  params.temperature = 0.5f;
  Sampler cold(params, {});
  const std::vector<int> cold_counts = histogram(cold, logits, n);
  EXPECT_LT(chi_square(cold_counts, softmax(logits, 0.5), n), 18.5);  // 4 dof

  params.temperature = 2.0f;
  Sampler hot(params, {});
  const std::vector<int> hot_counts = histogram(hot, logits, n);
  EXPECT_LT(chi_square(hot_counts, softmax(logits, 2.0), n), 18.5);
  EXPECT_GT(cold_counts[2], hot_counts[2] + 3000);
}

TEST(Sampler, RepetitionPenaltyExactValues) {
  SamplingParams params = greedy();
  params.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1, 2, 2, 7, -3, 1000};  // out-of-range ids are ignored
  Sampler sampler(params, prompt);
  std::vector<float> logits = {1.0f, 4.0f, -3.0f, 5.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  sampler.apply_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, 2.0f, -6.0f, 5.0f, 0.0f, 0.0f, 0.0f, 0.0f}));
}

// The prompt only feeds the repetition penalty (the sampler skips collecting
// it without one): with frequency / presence penalties alone, a sampler over a
// long prompt penalises and samples exactly as one with no prompt.
TEST(Sampler, PromptMattersOnlyToTheRepetitionPenalty) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.seed = 11;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  std::vector<int32_t> prompt(8192);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 6);
  Sampler with_prompt(params, prompt);
  Sampler without(params, {});
  const std::vector<float> base = {1.0f, 0.5f, 0.25f, 2.0f, -1.0f, 0.0f};
  for (int step = 0; step < 50; ++step) {
    std::vector<float> a = base, b = base;
    ASSERT_EQ(with_prompt.sample(a), without.sample(b)) << "step " << step;
    ASSERT_EQ(a, b) << "step " << step;
  }
  // With a repetition penalty the prompt's tokens are penalised before any output.
  params.repetition_penalty = 2.0f;
  Sampler repeated(params, prompt);
  std::vector<float> logits = base;
  repeated.apply_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{0.5f, 0.25f, 0.125f, 1.0f, -2.0f, 0.0f}));
}

TEST(Sampler, RepetitionPenaltyFlipsGreedy) {
  SamplingParams params = greedy();
  params.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {0};
  Sampler sampler(params, prompt);
  std::vector<float> logits = {3.0f, 2.0f};  // token 0 -> 1.5
  EXPECT_EQ(sampler.sample(logits), 1);
  EXPECT_EQ(logits[0], 1.5f);
  // The output token 1 is now penalised too: 2.0 -> 1.0 < 1.5.
  logits = {3.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits), 0);
}

TEST(Sampler, FrequencyAndPresenceExactValues) {
  SamplingParams params = greedy();
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  const std::vector<int32_t> prompt = {1};  // the prompt does not count here
  Sampler sampler(params, prompt);
  // Generate 3, 3, 0 by making each the clear argmax.
  std::vector<float> pick3 = {0.0f, 0.0f, 0.0f, 10.0f};
  EXPECT_EQ(sampler.sample(pick3), 3);
  pick3 = {0.0f, 0.0f, 0.0f, 10.0f};
  EXPECT_EQ(sampler.sample(pick3), 3);
  std::vector<float> pick0 = {10.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(sampler.sample(pick0), 0);

  std::vector<float> logits = {0.0f, 0.0f, 0.0f, 0.0f};
  sampler.apply_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{-0.75f, 0.0f, 0.0f, -1.25f}));
}

TEST(Sampler, FrequencyPenaltyFlipsGreedy) {
  SamplingParams params = greedy();
  params.frequency_penalty = 1.0f;
  Sampler sampler(params, {});
  std::vector<float> logits = {1.0f, 0.5f};
  EXPECT_EQ(sampler.sample(logits), 0);
  logits = {1.0f, 0.5f};  // token 0 -> 0.0
  EXPECT_EQ(sampler.sample(logits), 1);
  logits = {1.0f, 0.5f};  // 0 -> 0.0, 1 -> -0.5
  EXPECT_EQ(sampler.sample(logits), 0);
}

TEST(Sampler, NegativePresenceEncouragesRepeats) {
  SamplingParams params = greedy();
  params.presence_penalty = -1.0f;
  Sampler sampler(params, {});
  std::vector<float> logits = {1.0f, 1.5f};
  EXPECT_EQ(sampler.sample(logits), 1);
  logits = {2.0f, 1.5f};  // token 1 -> 2.5
  EXPECT_EQ(sampler.sample(logits), 1);
  EXPECT_EQ(logits[1], 2.5f);
}

TEST(Sampler, RepetitionAppliesBeforeFrequency) {
  SamplingParams params = greedy();
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 1.0f;
  Sampler sampler(params, {});
  std::vector<float> pick0 = {10.0f, 0.0f};
  EXPECT_EQ(sampler.sample(pick0), 0);
  std::vector<float> logits = {4.0f, 0.0f};
  sampler.apply_penalties(logits);
  EXPECT_EQ(logits[0], 1.0f);  // 4 / 2 - 1, not (4 - 1) / 2
}

TEST(Sampler, PenaltiesOffLeaveLogitsAlone) {
  const std::vector<int32_t> prompt = {0, 1, 2};
  Sampler sampler(greedy(), prompt);
  std::vector<float> logits = {1.0f, -2.0f, 3.0f};
  EXPECT_EQ(sampler.sample(logits), 2);
  logits = {1.0f, -2.0f, 3.0f};
  sampler.apply_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 3.0f}));
}

// --- distribution(): the law sample() draws from ----------------------------

std::vector<float> distribution_of(Sampler& sampler, std::vector<float> logits) {
  std::vector<float> probs;
  sampler.distribution(logits, probs);
  return probs;
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  double total = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-6) << "token " << i;
    if (want[i] == 0.0) {
      EXPECT_EQ(got[i], 0.0f) << "token " << i << " must be impossible";
    }
    total += got[i];
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
}

SamplingParams with_filters(int32_t top_k, float top_p, float min_p) {
  SamplingParams params = seeded(30);
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  return params;
}

TEST(SamplerDistribution, TemperatureIsSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    SamplingParams params = seeded(31);
    params.temperature = temperature;
    Sampler sampler(params, {});
    expect_probs(distribution_of(sampler, logits), softmax(logits, temperature));
  }
}

TEST(SamplerDistribution, TopK) {
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});
  Sampler sampler(with_filters(2, 1.0f, 0.0f), {});
  expect_probs(distribution_of(sampler, logits), {0.625, 0.375, 0, 0});
  // Ties at the cut keep the lowest id, as in TopKKeepsOnlyTheBest.
  const std::vector<double> kept = softmax({6.0f, 5.0f, 2.0f});
  Sampler ties(with_filters(3, 1.0f, 0.0f), {});
  expect_probs(distribution_of(ties, {5.0f, 2.0f, 6.0f, 2.0f, -1.0f, 2.0f, 1.0f}),
               {kept[1], kept[2], kept[0], 0, 0, 0, 0});
}

TEST(SamplerDistribution, TopP) {
  Sampler sampler(with_filters(0, 0.6f, 0.0f), {});
  expect_probs(distribution_of(sampler, log_probs({0.15, 0.5, 0.05, 0.3})), {0, 0.625, 0, 0.375});
  // After top-k, over the renormalised distribution (TopPAppliesAfterTopK).
  Sampler after_k(with_filters(3, 0.82f, 0.0f), {});
  expect_probs(distribution_of(after_k, log_probs({0.5, 0.3, 0.15, 0.05})), {0.625, 0.375, 0, 0});
  // Ties keep the lowest ids.
  Sampler ties(with_filters(0, 0.25f, 0.0f), {});
  expect_probs(distribution_of(ties, std::vector<float>(10, 0.5f)),
               {1 / 3.0, 1 / 3.0, 1 / 3.0, 0, 0, 0, 0, 0, 0, 0});
}

TEST(SamplerDistribution, MinPOnEveryPath) {
  const std::vector<float> logits = log_probs({0.5, 0.3, 0.15, 0.05});
  const std::vector<double> want = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0};  // p >= 0.1
  Sampler dense(with_filters(0, 1.0f, 0.2f), {});
  expect_probs(distribution_of(dense, logits), want);
  Sampler top_p(with_filters(0, 0.99f, 0.2f), {});
  expect_probs(distribution_of(top_p, logits), want);
  Sampler top_k(with_filters(3, 1.0f, 0.2f), {});
  expect_probs(distribution_of(top_k, logits), want);
  Sampler strict(with_filters(0, 1.0f, 0.7f), {});
  expect_probs(distribution_of(strict, logits), {1, 0, 0, 0});
}

TEST(SamplerDistribution, PenaltiesApplyAndLogitsChangeInPlace) {
  SamplingParams params = seeded(32);
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 1.0f;
  const std::vector<int32_t> prompt = {2};
  Sampler sampler(params, prompt);
  sampler.record_output(1);
  // Repetition over {1, 2}: 1 -> 0.5; presence over output {1}: 0.5 -> -0.5.
  std::vector<float> logits = {1.0f, 1.0f, 1.0f, 1.0f};
  std::vector<float> probs;
  sampler.distribution(logits, probs);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -0.5f, 0.5f, 1.0f}));
  expect_probs(probs, softmax({1.0f, -0.5f, 0.5f, 1.0f}));
}

TEST(SamplerDistribution, GreedyIsOneHotAtSamplesToken) {
  Sampler sampler(greedy(), {});
  expect_probs(distribution_of(sampler, {0.1f, 2.0f, -1.0f, 2.0f}), {0, 1, 0, 0});
  SamplingParams tiny = seeded(33);
  tiny.temperature = 1e-6f;
  Sampler tiny_sampler(tiny, {});
  expect_probs(distribution_of(tiny_sampler, {0.0f, 0.0f, 0.01f}), {0, 0, 1});
  EXPECT_TRUE(sampler.greedy());
  EXPECT_TRUE(tiny_sampler.greedy());
  EXPECT_FALSE(Sampler(seeded(1), {}).greedy());

  // Nothing finite: one-hot at token 0, what sample() returns.
  Sampler hot(seeded(34), {});
  expect_probs(distribution_of(hot, {kNaN, -kInf, kNaN}), {1, 0, 0});
  // NaN rows drop out; +inf takes everything.
  expect_probs(distribution_of(hot, {kNaN, 0.0f, kNaN, 0.0f}), {0, 0.5, 0, 0.5});
  expect_probs(distribution_of(hot, {1.0f, kInf, -kInf, 2.0f}), {0, 1, 0, 0});
}

TEST(SamplerDistribution, RecordsNothingAndLeavesTheRngAlone) {
  SamplingParams params = seeded(35);
  params.presence_penalty = 1.0f;
  Sampler a(params, {});
  Sampler b(params, {});
  const std::vector<float> logits = random_logits(100, 36, 1.0f);
  for (int i = 0; i < 10; ++i) distribution_of(a, logits);
  std::vector<float> penalties(100, 0.0f);
  a.apply_penalties(penalties);
  EXPECT_EQ(penalties, std::vector<float>(100, 0.0f));
  for (int step = 0; step < 20; ++step) {
    std::vector<float> la = logits, lb = logits;
    ASSERT_EQ(a.sample(la), b.sample(lb)) << "step " << step;
  }
}

TEST(SamplerDistribution, SupportMatchesSampleOnLargeVocab) {
  const std::vector<float> logits = random_logits(20000, 37, 2.0f);
  const struct {
    int32_t top_k;
    float top_p, min_p;
  } cases[] = {
      {0, 1.0f, 0.0f}, {40, 1.0f, 0.0f}, {0, 0.8f, 0.0f}, {100, 0.9f, 0.01f}, {0, 0.95f, 0.001f}};
  for (const auto& c : cases) {
    SCOPED_TRACE(testing::Message()
                 << "top_k " << c.top_k << " top_p " << c.top_p << " min_p " << c.min_p);
    SamplingParams params = with_filters(c.top_k, c.top_p, c.min_p);
    Sampler sampler(params, {});
    const std::vector<float> probs = distribution_of(sampler, logits);
    double total = 0.0;
    size_t support = 0;
    for (float p : probs) {
      total += p;
      support += p > 0.0f;
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
    if (c.top_k > 0) {
      EXPECT_LE(support, static_cast<size_t>(c.top_k));
    }
    // Every token sample() draws is in the support.
    const std::vector<int> counts = histogram(sampler, logits, 200);
    for (size_t i = 0; i < counts.size(); ++i) {
      if (counts[i] > 0) {
        EXPECT_GT(probs[i], 0.0f) << "token " << i;
      }
    }
  }
}

TEST(SamplerDistribution, DrawOnTheDensePathPicksSamplesToken) {
  // Without top-k / top-p, sample() and draw() walk the same CDF in token id
  // order with the same uniform; only float rounding of the normalised
  // probabilities can move a CDF step, so a disagreement needs a uniform
  // within about 1e-7 of one. Not guaranteed, hence a count, not equality.
  SamplingParams params = seeded(38);
  params.temperature = 0.8f;
  params.min_p = 0.02f;
  Sampler a(params, {});
  Sampler b(params, {});
  int mismatches = 0;
  const int steps = 2000;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> la = random_logits(1000, 500 + step, 1.5f);
    std::vector<float> lb = la;
    std::vector<float> probs;
    b.distribution(lb, probs);
    mismatches += a.sample(la) != b.draw(probs);
  }
  EXPECT_LE(mismatches, steps / 500);
}

TEST(SamplerDistribution, DrawUsesOneUniformLikeSample) {
  // Whatever the path, a draw consumes exactly what sample() consumes, so a
  // request's RNG stream stays in step whichever way its tokens are drawn.
  for (int32_t top_k : {0, 5}) {
    SamplingParams params = with_filters(top_k, top_k > 0 ? 1.0f : 0.9f, 0.0f);
    Sampler a(params, {});
    Sampler b(params, {});
    for (int step = 0; step < 50; ++step) {
      std::vector<float> la = random_logits(300, 600 + step);
      std::vector<float> lb = la;
      std::vector<float> probs;
      b.distribution(lb, probs);
      const int32_t drawn = b.draw(probs);
      EXPECT_GT(probs[drawn], 0.0f);
      a.sample(la);
    }
    EXPECT_EQ(a.uniform(), b.uniform());
  }
}

TEST(Sampler, DrawInvertsTheCdf) {
  Sampler sampler(seeded(39), {});
  const std::vector<float> one_hot = {0.0f, 0.0f, 1.0f, 0.0f};
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sampler.draw(one_hot), 2);
  const std::vector<float> probs = {0.1f, 0.0f, 0.6f, 0.3f};
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[sampler.draw(probs)];
  EXPECT_LT(chi_square(counts, {0.1, 0.0, 0.6, 0.3}, n), 13.8);  // 2 dof, p = 0.001
}

TEST(Sampler, RecordOutputFeedsPenalties) {
  SamplingParams params = greedy();
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  Sampler sampler(params, {});
  sampler.record_output(3);  // before any logits: the vocab is not known yet
  sampler.record_output(3);
  sampler.record_output(0);
  std::vector<float> logits(5, 0.0f);
  sampler.apply_penalties(logits);
  EXPECT_EQ(logits, (std::vector<float>{-0.75f, 0.0f, 0.0f, -1.25f, 0.0f}));
}

TEST(Sampler, CopiesShareStateUntilReseeded) {
  SamplingParams params = seeded(40);
  params.presence_penalty = 2.0f;
  Sampler original(params, {});
  original.record_output(1);
  Sampler copy = original;
  std::vector<float> a(8, 0.0f), b(8, 0.0f);
  original.apply_penalties(a);
  copy.apply_penalties(b);
  EXPECT_EQ(a, b);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(original.uniform(), copy.uniform());
  copy.reseed(41);
  int same = 0;
  for (int i = 0; i < 20; ++i) same += original.uniform() == copy.uniform();
  EXPECT_EQ(same, 0);
  // reseed() restarts the stream as a sampler constructed with that seed.
  Sampler fresh(seeded(41), {});
  copy.reseed(41);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(fresh.uniform(), copy.uniform());
}

// --- SamplingParams::validate ----------------------------------------------

// Applies `change` to default params and returns the validation message.
template <typename Change>
std::string rejection(Change change) {
  SamplingParams params;
  change(params);
  const Status status = params.validate();
  EXPECT_FALSE(status.ok());
  return status.ok() ? std::string() : status.message();
}

TEST(SamplingParamsValidate, AcceptsDefaultsAndBoundaries) {
  EXPECT_TRUE(SamplingParams{}.validate().ok());
  SamplingParams edges;
  edges.temperature = 0.0f;
  edges.top_p = 1.0f;
  edges.top_k = -1;
  edges.min_p = 1.0f;
  edges.repetition_penalty = 0.01f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.max_tokens = 1;
  edges.stop_strings = std::vector<std::string>(16, "x");
  edges.stop_token_ids = {0, 7};
  EXPECT_TRUE(edges.validate().ok()) << edges.validate().message();
  edges.top_k = 0;
  edges.min_p = 0.0f;
  EXPECT_TRUE(edges.validate().ok());
}

TEST(SamplingParamsValidate, RejectsEachBadFieldByName) {
  EXPECT_EQ(rejection([](SamplingParams& p) { p.top_p = 1.5f; }),
            "top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.top_p = 0.0f; }), "top_p must be in (0, 1], got 0");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.temperature = -0.5f; }),
            "temperature must be a finite number >= 0, got -0.5");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.top_k = -2; }),
            "top_k must be >= -1 (0 or -1 disables it), got -2");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.min_p = 1.25f; }),
            "min_p must be in [0, 1], got 1.25");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.min_p = -0.25f; }),
            "min_p must be in [0, 1], got -0.25");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.repetition_penalty = 0.0f; }),
            "repetition_penalty must be a finite number > 0, got 0");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.presence_penalty = 2.5f; }),
            "presence_penalty must be in [-2, 2], got 2.5");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.frequency_penalty = -3.0f; }),
            "frequency_penalty must be in [-2, 2], got -3");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.max_tokens = 0; }),
            "max_tokens must be >= 1, got 0");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.stop_strings.assign(17, "x"); }),
            "stop_strings may hold at most 16 strings, got 17");
  EXPECT_EQ(rejection([](SamplingParams& p) {
              p.stop_strings = {"a", ""};
            }),
            "stop_strings[1] must not be empty");
  EXPECT_EQ(rejection([](SamplingParams& p) {
              p.stop_token_ids = {2, -1};
            }),
            "stop_token_ids[1] must be >= 0, got -1");
}

TEST(SamplingParamsValidate, RejectsNonFiniteValues) {
  EXPECT_EQ(rejection([](SamplingParams& p) { p.temperature = kNaN; }),
            "temperature must be a finite number >= 0, got nan");
  EXPECT_EQ(rejection([](SamplingParams& p) { p.temperature = kInf; }),
            "temperature must be a finite number >= 0, got inf");
  EXPECT_NE(rejection([](SamplingParams& p) { p.top_p = kNaN; }).find("top_p"), std::string::npos);
  EXPECT_NE(rejection([](SamplingParams& p) { p.min_p = kNaN; }).find("min_p"), std::string::npos);
  EXPECT_NE(
      rejection([](SamplingParams& p) { p.repetition_penalty = kInf; }).find("repetition_penalty"),
      std::string::npos);
  EXPECT_NE(
      rejection([](SamplingParams& p) { p.presence_penalty = kNaN; }).find("presence_penalty"),
      std::string::npos);
  EXPECT_NE(
      rejection([](SamplingParams& p) { p.frequency_penalty = kNaN; }).find("frequency_penalty"),
      std::string::npos);
}

}  // namespace
}  // namespace specstack

// sample_row (model/row_sampling.h), the host twin of the GPU's sampling
// kernel, against the engine's Sampler: greedy rows take the masked argmax,
// sampled rows pick from exactly the distribution Sampler::distribution
// describes (temperature, top-k, top-p, min-p, a grammar mask), checked by
// sweeping the uniform over a fine grid: the share of the grid that lands on
// each token is its probability, up to the grid step. Sampler::device_draw
// hands the request's parameters and the uniform sample() would draw.
#include "model/row_sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/sampler.h"

namespace specstack {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t vocab, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(vocab);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

// A mask admitting each token with probability `density` (at least one).
LogitMasks random_mask(size_t vocab, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  LogitMasks masks;
  masks.reset(1, static_cast<int64_t>(vocab));
  std::span<uint32_t> bits = masks.add(0);
  std::fill(bits.begin(), bits.end(), 0u);
  for (size_t t = 0; t < vocab; ++t) {
    if (unit(rng) < density || t == vocab / 2) bits[t / 32] |= 1u << (t % 32);
  }
  return masks;
}

TEST(RowSampling, GreedyRowsTakeTheMaskedArgmax) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> logits = random_logits(300, seed, 2.0f);
    logits[7] = std::numeric_limits<float>::quiet_NaN();
    const LogitMasks masks = random_mask(300, 0.3, seed + 100);
    for (float temperature : {0.0f, -1.0f}) {
      RowSampling greedy;
      greedy.temperature = temperature;
      greedy.uniform = 0.7f;
      EXPECT_EQ(sample_row(logits.data(), 300, greedy, &masks, 0),
                masked_argmax(logits.data(), 300, &masks, 0));
      EXPECT_EQ(sample_row(logits.data(), 300, greedy, nullptr, 0),
                masked_argmax(logits.data(), 300, nullptr, 0));
    }
  }
  // Ties go to the lowest id; all -inf gives token 0 (as the sampler and kernel).
  std::vector<float> tied(64, -1.0f);
  tied[40] = tied[9] = 3.0f;
  EXPECT_EQ(sample_row(tied.data(), 64, RowSampling{}, nullptr, 0), 9);
  std::vector<float> none(64, -kInf);
  RowSampling sampled;
  sampled.temperature = 1.0f;
  sampled.uniform = 0.5f;
  EXPECT_EQ(sample_row(none.data(), 64, sampled, nullptr, 0), 0);
}

struct Case {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double mask_density;  // 0: no mask
};

// The share of a fine uniform grid each token takes is the probability the
// engine's Sampler gives it, for every combination of the filters.
TEST(RowSampling, UniformSweepGivesTheSamplersDistribution) {
  const Case cases[] = {
      {1.0f, 0, 1.0f, 0.0f, 0.0},   {0.7f, 0, 1.0f, 0.0f, 0.5},  {1.0f, 20, 1.0f, 0.0f, 0.0},
      {1.3f, 0, 0.9f, 0.0f, 0.0},   {1.0f, 50, 0.8f, 0.0f, 0.3}, {1.0f, 0, 1.0f, 0.05f, 0.0},
      {0.8f, 30, 0.95f, 0.1f, 0.0}, {1.5f, 0, 0.7f, 0.02f, 0.6}, {2.0f, 5, 1.0f, 0.3f, 0.1},
  };
  constexpr size_t kVocab = 400;
  constexpr int kGrid = 50000;
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << c.temperature << " top_k " << c.top_k << " top_p " << c.top_p
                 << " min_p " << c.min_p << " mask " << c.mask_density);
    std::vector<float> logits = random_logits(kVocab, ++seed, 2.5f);
    LogitMasks masks;
    const LogitMasks* mask = nullptr;
    if (c.mask_density > 0) {
      masks = random_mask(kVocab, c.mask_density, ++seed);
      mask = &masks;
    }
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    // The Sampler sees the masked row as the engine gives it: -inf outside.
    std::vector<float> masked = logits;
    for (size_t t = 0; t < kVocab; ++t) {
      if (mask != nullptr && !mask->admits(0, static_cast<int32_t>(t))) masked[t] = -kInf;
    }
    Sampler sampler(params, {});
    std::vector<float> probs;
    sampler.distribution(masked, probs);

    RowSampling sampling;
    sampling.temperature = c.temperature;
    sampling.top_k = c.top_k;
    sampling.top_p = c.top_p;
    sampling.min_p = c.min_p;
    std::vector<int64_t> hits(kVocab, 0);
    for (int j = 0; j < kGrid; ++j) {
      sampling.uniform = static_cast<float>((j + 0.5) / kGrid);
      ++hits[size_t(sample_row(logits.data(), kVocab, sampling, mask, 0))];
    }
    int n_kept = 0;
    for (size_t t = 0; t < kVocab; ++t) {
      const double share = static_cast<double>(hits[t]) / kGrid;
      // A token's interval is cut into grid steps at both ends; fp32
      // uniforms round the grid points by < 1e-7.
      EXPECT_NEAR(share, probs[t], 2.0 / kGrid + 1e-6) << "token " << t;
      if (probs[t] == 0.0f) {
        EXPECT_EQ(hits[t], 0) << "token " << t;
      }
      n_kept += probs[t] > 0.0f;
    }
    EXPECT_GE(n_kept, 2);  // each case really samples
  }
}

// device_draw: the request's filters and one uniform, the very draw sample()
// would have made next (the generators stay in step); greedy: the argmax.
TEST(RowSampling, DeviceDrawTakesTheNextUniform) {
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 40;
  params.top_p = 0.95f;
  params.min_p = 0.05f;
  params.seed = 77;
  Sampler a(params, {});
  Sampler b(params, {});
  for (int i = 0; i < 5; ++i) {
    const RowSampling s = a.device_draw();
    EXPECT_EQ(s.temperature, 0.9f);
    EXPECT_EQ(s.top_k, 40);
    EXPECT_EQ(s.top_p, 0.95f);
    EXPECT_EQ(s.min_p, 0.05f);
    const double u = b.uniform();
    EXPECT_NEAR(s.uniform, u, 1e-7);
    EXPECT_LT(s.uniform, 1.0f);
  }
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0f;
  Sampler greedy(greedy_params, {});
  const RowSampling g = greedy.device_draw();
  EXPECT_EQ(g.temperature, 0.0f);
}

}  // namespace
}  // namespace specstack

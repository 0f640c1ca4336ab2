// The statistical proof that speculative decoding samples exactly from the
// target: draft tokens drawn from a draft Sampler's processed distribution,
// verified by verify_stochastic against a target Sampler's, give emitted tokens
// whose law is the target's, for every sampling setting. A deliberately wrong
// verifier run through the same harness fails, so the test has power.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <span>
#include <vector>

#include "chi_square.h"
#include "engine/sampler.h"
#include "specdecode/rejection_sampler.h"

namespace specstack {
namespace {

constexpr int32_t kDraftTokens = 3;  // k
constexpr int kStreams = 100000;     // each needs one or more verifications
constexpr double kAlpha = 0.001;

// Draft and target disagree a lot: the target's favourites are the low ids,
// the draft's are scattered, so rejections (and residual draws) are common
// and top-k / top-p / min-p keep different sets on the two sides.
const std::vector<float> kTargetLogits = {2.0f,  1.5f,  1.0f,  0.5f,  0.0f,
                                          -0.5f, -1.0f, -1.5f, -2.0f, -3.0f};
const std::vector<float> kDraftLogits = {-1.0f, 0.0f,  2.5f, -2.0f, 1.0f,
                                         0.5f,  -0.5f, 1.5f, -3.0f, 0.0f};
// A draft close to the target: most tokens are accepted, so whole drafts and
// bonus tokens are common and the second emitted token is usually a draft's.
const std::vector<float> kCloseDraftLogits = {1.8f,  1.6f,  0.7f,  0.6f,  0.2f,
                                              -0.6f, -0.8f, -1.7f, -2.2f, -2.5f};

SamplingParams params_with(float temperature, int32_t top_k, float top_p, float min_p,
                           uint64_t seed) {
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  params.top_p = top_p;
  params.min_p = min_p;
  params.seed = seed;
  return params;
}

std::vector<float> processed(Sampler& sampler, const std::vector<float>& logits) {
  std::vector<float> row = logits;
  std::vector<float> probs;
  sampler.distribution(row, probs);
  return probs;
}

std::vector<double> as_double(const std::vector<float>& probs) {
  return std::vector<double>(probs.begin(), probs.end());
}

// One verification: draft tokens [k], their distributions, the target's rows
// and the verifier's uniforms in; the outcome out.
using Verifier = std::function<VerifyOutcome(
    std::span<const int32_t>, std::span<const std::span<const float>>,
    const std::function<std::span<const float>(int32_t)>&, const std::function<double()>&)>;

// The wrong residual of the negative control: after a rejection it draws from
// p instead of norm(max(0, p - q)), which over-weights the tokens the draft
// already proposes often. Built from the same blocks as verify_stochastic.
VerifyOutcome verify_with_p_as_residual(
    std::span<const int32_t> draft_tokens, std::span<const std::span<const float>> draft_probs,
    const std::function<std::span<const float>(int32_t)>& target_row,
    const std::function<double()>& uniform) {
  VerifyOutcome outcome;
  for (size_t i = 0; i < draft_tokens.size(); ++i) {
    const std::span<const float> p = target_row(static_cast<int32_t>(i));
    const int32_t token = draft_tokens[i];
    if (uniform() * draft_probs[i][token] < p[token]) {
      ++outcome.n_accepted;
      continue;
    }
    outcome.next_token = draw_from(p, uniform());
    return outcome;
  }
  outcome.next_token = draw_from(target_row(static_cast<int32_t>(draft_tokens.size())), uniform());
  return outcome;
}

struct StreamCounts {
  std::vector<int64_t> first;   // [vocab] the first emitted token
  std::vector<int64_t> second;  // [vocab] the token after it
  int64_t verifications = 0;
  int64_t accepted = 0;
};

// Fixed logits and no penalties: every row of both sides is the same, so
// each emitted token must be an independent draw from p. A stream drafts k
// tokens from q, verifies them, and repeats until it has emitted two tokens
// (a rejection at the first draft token emits only one).
StreamCounts run_streams(const SamplingParams& params, const std::vector<float>& draft_logits,
                         const Verifier& verifier) {
  SamplingParams draft_params = params;
  draft_params.seed = *params.seed + 1000;  // independent of the verifier's uniforms
  Sampler target(params, {});
  Sampler draft(draft_params, {});
  const std::vector<float> p = processed(target, kTargetLogits);
  const std::vector<float> q = processed(draft, draft_logits);
  const std::vector<std::span<const float>> draft_probs(kDraftTokens, std::span<const float>(q));
  const std::function<std::span<const float>(int32_t)> target_row =
      [&](int32_t) -> std::span<const float> { return p; };
  const std::function<double()> uniform = [&] { return target.uniform(); };

  StreamCounts counts;
  counts.first.assign(p.size(), 0);
  counts.second.assign(p.size(), 0);
  std::vector<int32_t> draft_tokens(kDraftTokens);
  std::vector<int32_t> emitted;
  for (int stream = 0; stream < kStreams; ++stream) {
    emitted.clear();
    while (emitted.size() < 2) {
      for (int32_t& token : draft_tokens) token = draft.draw(q);
      const VerifyOutcome outcome = verifier(draft_tokens, draft_probs, target_row, uniform);
      emitted.insert(emitted.end(), draft_tokens.begin(),
                     draft_tokens.begin() + outcome.n_accepted);
      emitted.push_back(outcome.next_token);
      ++counts.verifications;
      counts.accepted += outcome.n_accepted;
    }
    ++counts.first[emitted[0]];
    ++counts.second[emitted[1]];
  }
  return counts;
}

struct Combo {
  const char* name;
  SamplingParams params;
  const std::vector<float>* draft_logits = &kDraftLogits;
};

const Combo kCombos[] = {
    {"temperature 1", params_with(1.0f, 0, 1.0f, 0.0f, 101)},
    {"temperature 0.7, top_k 4", params_with(0.7f, 4, 1.0f, 0.0f, 102)},
    {"top_p 0.8", params_with(1.0f, 0, 0.8f, 0.0f, 103)},
    {"min_p 0.1", params_with(1.0f, 0, 1.0f, 0.1f, 104)},
    {"temperature 1.3, top_k 6, top_p 0.9, min_p 0.05", params_with(1.3f, 6, 0.9f, 0.05f, 105)},
    {"close draft, temperature 1", params_with(1.0f, 0, 1.0f, 0.0f, 106), &kCloseDraftLogits},
    {"close draft, temperature 0.8, top_p 0.9", params_with(0.8f, 0, 0.9f, 0.0f, 107),
     &kCloseDraftLogits},
};

TEST(ChiSquare, SurvivalFunctionKnownValues) {
  // Table critical values (rounded to the digits shown).
  EXPECT_NEAR(chi_square_survival(1, 3.841), 0.05, 5e-5);
  EXPECT_NEAR(chi_square_survival(10, 29.59), 0.001, 2e-6);
  EXPECT_NEAR(chi_square_survival(7, 24.32), 0.001, 2e-6);
  // Even df have a closed form, Q = exp(-x / 2) sum_{j < df / 2} (x / 2)^j / j!;
  // x below df / 2 + 1 takes the series branch, above it the continued fraction.
  for (double x : {0.1, 1.064, 2.5, 5.0, 12.0, 40.0}) {
    const double half = x / 2;
    const double df2 = std::exp(-half);
    const double df4 = std::exp(-half) * (1 + half);
    const double df6 = std::exp(-half) * (1 + half + half * half / 2);
    EXPECT_NEAR(chi_square_survival(2, x), df2, 1e-12 * df2) << "x " << x;
    EXPECT_NEAR(chi_square_survival(4, x), df4, 1e-12 * df4) << "x " << x;
    EXPECT_NEAR(chi_square_survival(6, x), df6, 1e-12 * df6) << "x " << x;
  }
  EXPECT_EQ(chi_square_survival(3, 0.0), 1.0);
}

TEST(ChiSquare, FitMergesSmallCellsAndReportsImpossibleTokens) {
  // Expected counts 50, 40, 6, 3, 1 (n = 100): the last two merge into 4,
  // then with the 6 into 10: three cells, df = 2.
  const ChiSquareFit fit = chi_square_fit({50, 40, 6, 3, 1, 2}, {0.5, 0.4, 0.06, 0.03, 0.01, 0.0});
  EXPECT_EQ(fit.df, 2);
  EXPECT_EQ(fit.zero_probability_hits, 2);
  EXPECT_NEAR(fit.statistic, 0.0, 0.6);
}

TEST(SpeculativeSampling, EmittedTokensFollowTheTarget) {
  for (const Combo& combo : kCombos) {
    SCOPED_TRACE(combo.name);
    const StreamCounts counts = run_streams(combo.params, *combo.draft_logits, verify_stochastic);
    Sampler reference(combo.params, {});
    const std::vector<double> p = as_double(processed(reference, kTargetLogits));
    const ChiSquareFit first = chi_square_fit(counts.first, p);
    const ChiSquareFit second = chi_square_fit(counts.second, p);
    std::printf(
        "  %-48s verifications %lld, acceptance %.3f; first: chi2 %.2f df %d p %.4f; "
        "second: chi2 %.2f df %d p %.4f\n",
        combo.name, static_cast<long long>(counts.verifications),
        static_cast<double>(counts.accepted) / (counts.verifications * kDraftTokens),
        first.statistic, first.df, first.p_value, second.statistic, second.df, second.p_value);
    EXPECT_GE(counts.verifications, kStreams);
    EXPECT_EQ(first.zero_probability_hits, 0);
    EXPECT_EQ(second.zero_probability_hits, 0);
    EXPECT_GT(first.df, 0);
    EXPECT_GT(first.p_value, kAlpha);
    EXPECT_GT(second.p_value, kAlpha);
  }
}

TEST(SpeculativeSampling, WrongResidualFails) {
  // The negative control: the same harness, draft, target and seed, with the
  // residual replaced by p. If this passed, the test above would prove nothing.
  const Combo& combo = kCombos[0];
  const StreamCounts counts =
      run_streams(combo.params, *combo.draft_logits, verify_with_p_as_residual);
  Sampler reference(combo.params, {});
  const std::vector<double> p = as_double(processed(reference, kTargetLogits));
  const ChiSquareFit first = chi_square_fit(counts.first, p);
  const ChiSquareFit second = chi_square_fit(counts.second, p);
  std::printf("  wrong residual: first: chi2 %.1f df %d p %.3g; second: chi2 %.1f df %d p %.3g\n",
              first.statistic, first.df, first.p_value, second.statistic, second.df,
              second.p_value);
  EXPECT_LT(first.p_value, kAlpha);
  EXPECT_LT(second.p_value, kAlpha);
}

// --- penalties: rows that change with every accepted token ---------------------

struct PenaltyCounts {
  std::vector<int64_t> first;  // [vocab]
  std::vector<int64_t> pair;   // [vocab * vocab] (first, second)
  int64_t out_of_order = 0;    // streams whose penalty state differs from the emitted tokens'
};

// The engine's way with penalties: the draft is a copy of the target's
// sampler (same penalty state) with its own seed, records each token it
// drafts, and target_row(i) records the accepted draft token i - 1 before
// computing row i; the emitted next token is recorded after verification.
PenaltyCounts run_penalty_streams(const SamplingParams& params, int n_streams,
                                  bool reseed_draft = true) {
  const Sampler base(params, {});
  std::mt19937_64 seeds(*params.seed);
  const size_t vocab = kTargetLogits.size();
  PenaltyCounts counts;
  counts.first.assign(vocab, 0);
  counts.pair.assign(vocab * vocab, 0);

  std::vector<int32_t> draft_tokens(kDraftTokens);
  std::vector<std::vector<float>> q(kDraftTokens);
  std::vector<float> p;
  std::vector<int32_t> emitted;
  for (int stream = 0; stream < n_streams; ++stream) {
    Sampler target = base;
    target.reseed(seeds());
    emitted.clear();
    while (emitted.size() < 2) {
      Sampler draft = target;
      if (reseed_draft) draft.reseed(seeds());
      for (int32_t i = 0; i < kDraftTokens; ++i) {
        std::vector<float> row = kDraftLogits;
        draft.distribution(row, q[i]);
        draft_tokens[i] = draft.draw(q[i]);
        draft.record_output(draft_tokens[i]);
      }
      const std::vector<std::span<const float>> draft_probs(q.begin(), q.end());
      const auto target_row = [&](int32_t i) -> std::span<const float> {
        if (i >= 1) target.record_output(draft_tokens[i - 1]);  // accepted, per the contract
        std::vector<float> row = kTargetLogits;
        target.distribution(row, p);
        return p;
      };
      const VerifyOutcome outcome = verify_stochastic(draft_tokens, draft_probs, target_row,
                                                      [&] { return target.uniform(); });
      target.record_output(outcome.next_token);
      emitted.insert(emitted.end(), draft_tokens.begin(),
                     draft_tokens.begin() + outcome.n_accepted);
      emitted.push_back(outcome.next_token);
    }
    ++counts.first[emitted[0]];
    ++counts.pair[emitted[0] * vocab + emitted[1]];

    // The target's penalty state must be exactly that of the emitted tokens.
    Sampler replay = base;
    for (int32_t token : emitted) replay.record_output(token);
    std::vector<float> got(vocab, 0.0f), want(vocab, 0.0f);
    target.apply_penalties(got);
    replay.apply_penalties(want);
    counts.out_of_order += got != want;
  }
  return counts;
}

TEST(SpeculativeSampling, PenaltiesFollowTheLazyRowContract) {
  SamplingParams params = params_with(1.0f, 0, 1.0f, 0.0f, 201);
  params.presence_penalty = 1.5f;
  params.frequency_penalty = 0.5f;
  params.repetition_penalty = 1.3f;

  // The rows really differ per position: after token 0 the target's row moves.
  const Sampler base(params, {});
  Sampler after_zero = base;
  after_zero.record_output(0);
  Sampler fresh = base;
  const std::vector<float> p0 = processed(fresh, kTargetLogits);
  const std::vector<float> p1 = processed(after_zero, kTargetLogits);
  EXPECT_LT(p1[0], p0[0] / 2);

  // The exact law of the first two tokens without speculation:
  // P(x, y) = p0(x) * p_x(y), p_x the row after recording x.
  const size_t vocab = kTargetLogits.size();
  std::vector<double> pair_law(vocab * vocab);
  for (size_t x = 0; x < vocab; ++x) {
    Sampler after_x = base;
    after_x.record_output(static_cast<int32_t>(x));
    const std::vector<float> p_x = processed(after_x, kTargetLogits);
    for (size_t y = 0; y < vocab; ++y) pair_law[x * vocab + y] = double{p0[x]} * p_x[y];
  }

  const PenaltyCounts counts = run_penalty_streams(params, kStreams / 2);
  EXPECT_EQ(counts.out_of_order, 0);
  const ChiSquareFit first = chi_square_fit(counts.first, as_double(p0));
  const ChiSquareFit pair = chi_square_fit(counts.pair, pair_law);
  std::printf("  penalties: first: chi2 %.2f df %d p %.4f; pair: chi2 %.2f df %d p %.4f\n",
              first.statistic, first.df, first.p_value, pair.statistic, pair.df, pair.p_value);
  EXPECT_EQ(first.zero_probability_hits + pair.zero_probability_hits, 0);
  EXPECT_GT(first.p_value, kAlpha);
  EXPECT_GT(pair.p_value, kAlpha);
}

TEST(SpeculativeSampling, DraftSharingTheVerifiersRngIsBiased) {
  // A draft sampler copied from the target keeps the target's RNG state, so
  // without reseed() its draws replay the very uniforms the verifier then
  // uses to accept them: the draft token and its acceptance test are
  // correlated and the output is no longer the target's law.
  SamplingParams params = params_with(1.0f, 0, 1.0f, 0.0f, 202);
  params.presence_penalty = 1.5f;
  Sampler fresh(params, {});
  const std::vector<double> p0 = as_double(processed(fresh, kTargetLogits));
  const PenaltyCounts counts = run_penalty_streams(params, kStreams / 2, /*reseed_draft=*/false);
  const ChiSquareFit first = chi_square_fit(counts.first, p0);
  std::printf("  draft sharing the verifier's RNG: first: chi2 %.1f df %d p %.3g\n",
              first.statistic, first.df, first.p_value);
  EXPECT_LT(first.p_value, kAlpha);
}

}  // namespace
}  // namespace specstack

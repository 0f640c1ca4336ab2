#include "specdecode/rejection_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace specstack {
namespace {

using Row = std::vector<float>;

// A uniform() that replays fixed values, and counts how many were used.
struct ScriptedUniform {
  std::vector<double> values;
  size_t used = 0;
  double operator()() {
    EXPECT_LT(used, values.size()) << "more uniforms than scripted";
    return used < values.size() ? values[used++] : 0.0;
  }
};

// target_row for fixed rows that records which rows were asked for.
struct RecordingTarget {
  explicit RecordingTarget(std::vector<Row> rows_in) : rows(std::move(rows_in)) {}
  std::vector<Row> rows;
  std::vector<int32_t> asked;
  std::span<const float> operator()(int32_t i) {
    asked.push_back(i);
    return rows.at(static_cast<size_t>(i));
  }
};

std::vector<std::span<const float>> spans(const std::vector<Row>& rows) {
  return std::vector<std::span<const float>>(rows.begin(), rows.end());
}

VerifyOutcome verify(const std::vector<int32_t>& draft, const std::vector<Row>& q,
                     RecordingTarget& target, ScriptedUniform& uniform) {
  const std::vector<std::span<const float>> q_spans = spans(q);
  return verify_stochastic(draft, q_spans, std::ref(target), std::ref(uniform));
}

// --- verify_greedy ------------------------------------------------------------

TEST(VerifyGreedy, AllAcceptedTakesTheBonus) {
  const std::vector<int32_t> draft = {4, 7, 1};
  const std::vector<int32_t> argmax = {4, 7, 1, 9};
  const VerifyOutcome outcome = verify_greedy(draft, argmax);
  EXPECT_EQ(outcome.n_accepted, 3);
  EXPECT_EQ(outcome.next_token, 9);
}

TEST(VerifyGreedy, StopsAtTheFirstMismatch) {
  // Draft token 2 would match again, but nothing after a mismatch counts:
  // the target's row 2 was computed after the rejected token.
  const std::vector<int32_t> draft = {4, 5, 1};
  const std::vector<int32_t> argmax = {4, 7, 1, 9};
  const VerifyOutcome outcome = verify_greedy(draft, argmax);
  EXPECT_EQ(outcome.n_accepted, 1);
  EXPECT_EQ(outcome.next_token, 7);

  const VerifyOutcome first =
      verify_greedy(std::vector<int32_t>{3, 7}, std::vector<int32_t>{2, 7, 0});
  EXPECT_EQ(first.n_accepted, 0);
  EXPECT_EQ(first.next_token, 2);
}

TEST(VerifyGreedy, NoDraftTokensIsAPlainStep) {
  const VerifyOutcome outcome = verify_greedy({}, std::vector<int32_t>{6});
  EXPECT_EQ(outcome.n_accepted, 0);
  EXPECT_EQ(outcome.next_token, 6);
}

// --- residual_distribution -------------------------------------------------------

TEST(ResidualDistribution, NormalisesThePositivePart) {
  // p - q = {0.3, -0.2, 0.1, -0.2}: the positive part sums to 0.4.
  const Row p = {0.5f, 0.1f, 0.3f, 0.1f};
  const Row q = {0.2f, 0.3f, 0.2f, 0.3f};
  Row out;
  residual_distribution(p, q, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0], 0.75f, 1e-6f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 0.25f, 1e-6f);
  EXPECT_EQ(out[3], 0.0f);
}

TEST(ResidualDistribution, ShorterDraftVocabCountsAsZero) {
  // The draft knows tokens 0 and 1 only; tokens 2 and 3 keep all of p.
  const Row p = {0.4f, 0.2f, 0.3f, 0.1f};
  const Row q = {0.5f, 0.5f};
  Row out;
  residual_distribution(p, q, out);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 0.75f, 1e-6f);
  EXPECT_NEAR(out[3], 0.25f, 1e-6f);
}

TEST(ResidualDistribution, EqualDistributionsFallBackToP) {
  const Row p = {0.25f, 0.0f, 0.75f};
  Row out;
  residual_distribution(p, p, out);
  EXPECT_EQ(out, p);
  // p below q everywhere (q not normalised, as rounding might leave it).
  residual_distribution(p, Row{0.3f, 0.1f, 0.8f}, out);
  EXPECT_EQ(out, p);
}

TEST(ResidualDistribution, KeepsTinyDifferences) {
  // A residual mass far below float epsilon (summed in double) still
  // normalises to a proper distribution instead of falling back to p.
  const Row p = {1e-30f, 1.0f};
  const Row q = {0.0f, 1.0f};
  Row out;
  residual_distribution(p, q, out);
  EXPECT_EQ(out, (Row{1.0f, 0.0f}));
}

// --- draw_from -----------------------------------------------------------------

TEST(DrawFrom, InverseCdf) {
  const Row probs = {0.25f, 0.5f, 0.25f};
  EXPECT_EQ(draw_from(probs, 0.0), 0);
  EXPECT_EQ(draw_from(probs, 0.2499), 0);
  EXPECT_EQ(draw_from(probs, 0.25), 1);  // the CDF step belongs to the next token
  EXPECT_EQ(draw_from(probs, 0.7499), 1);
  EXPECT_EQ(draw_from(probs, 0.75), 2);
  EXPECT_EQ(draw_from(probs, std::nextafter(1.0, 0.0)), 2);
}

TEST(DrawFrom, NeverReturnsAZeroProbabilityToken) {
  const Row probs = {0.0f, 0.5f, 0.0f, 0.5f, 0.0f, 0.0f};
  EXPECT_EQ(draw_from(probs, 0.0), 1);
  EXPECT_EQ(draw_from(probs, 0.4999), 1);
  EXPECT_EQ(draw_from(probs, 0.5), 3);
  // u = 1 is outside [0, 1) but is what rounding can produce: the last
  // positive token, not the trailing zeros.
  EXPECT_EQ(draw_from(probs, 1.0), 3);
  EXPECT_EQ(draw_from(probs, 1.5), 3);
}

TEST(DrawFrom, ScalesByTheActualSum) {
  // Probabilities that do not sum to 1 (rounded, or plain weights).
  const Row weights = {1.0f, 3.0f};
  EXPECT_EQ(draw_from(weights, 0.24), 0);
  EXPECT_EQ(draw_from(weights, 0.26), 1);
  const Row one_hot = {0.0f, 0.0f, 1.0f};
  EXPECT_EQ(draw_from(one_hot, 0.0), 2);
  EXPECT_EQ(draw_from(one_hot, 0.999), 2);
}

// --- verify_stochastic -----------------------------------------------------------

TEST(VerifyStochastic, AcceptsWhenUTimesQIsBelowP) {
  // x = 1: q(x) = 0.5, p(x) = 0.25, accepted iff u < 0.5.
  const std::vector<Row> q = {{0.5f, 0.5f}};
  RecordingTarget target{{{0.75f, 0.25f}, {0.0f, 1.0f}}};
  ScriptedUniform accept{{0.49, 0.3}};
  VerifyOutcome outcome = verify({1}, q, target, accept);
  EXPECT_EQ(outcome.n_accepted, 1);
  EXPECT_EQ(outcome.next_token, 1);  // the bonus, from row 1
  EXPECT_EQ(target.asked, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(accept.used, 2u);

  RecordingTarget target2{{{0.75f, 0.25f}, {0.0f, 1.0f}}};
  ScriptedUniform reject{{0.5, 0.999}};
  outcome = verify({1}, q, target2, reject);
  EXPECT_EQ(outcome.n_accepted, 0);
  // The residual max(0, p - q) = {0.25, 0}: token 0 whatever the uniform.
  EXPECT_EQ(outcome.next_token, 0);
  EXPECT_EQ(target2.asked, (std::vector<int32_t>{0}));
}

TEST(VerifyStochastic, TokenMoreLikelyUnderTheTargetIsAlwaysAccepted) {
  const std::vector<Row> q = {{0.9f, 0.1f}, {0.9f, 0.1f}};
  RecordingTarget target{{{0.5f, 0.5f}, {0.5f, 0.5f}, {0.0f, 1.0f}}};
  ScriptedUniform uniform{{0.99999, 0.99999, 0.5}};
  const VerifyOutcome outcome = verify({1, 1}, q, target, uniform);
  EXPECT_EQ(outcome.n_accepted, 2);
  EXPECT_EQ(outcome.next_token, 1);
}

TEST(VerifyStochastic, TokenTheTargetExcludesIsAlwaysRejected) {
  // The target's top-k left token 2 out: p(2) = 0 rejects even at u = 0.
  const std::vector<Row> q = {{0.2f, 0.2f, 0.6f}};
  RecordingTarget target{{{0.5f, 0.5f, 0.0f}, {1.0f, 0.0f, 0.0f}}};
  ScriptedUniform uniform{{0.0, 0.6}};
  const VerifyOutcome outcome = verify({2}, q, target, uniform);
  EXPECT_EQ(outcome.n_accepted, 0);
  // Residual {0.3, 0.3, 0} normalised to {0.5, 0.5, 0}; u = 0.6 -> token 1.
  EXPECT_EQ(outcome.next_token, 1);
}

TEST(VerifyStochastic, DraftVocabSmallerThanTarget) {
  // The draft has 2 tokens, the target 4 (padding rows, added tokens). The
  // residual puts the draft-unknown tokens' mass back.
  const std::vector<Row> q = {{0.5f, 0.5f}};
  RecordingTarget target{{{0.1f, 0.1f, 0.4f, 0.4f}}};
  ScriptedUniform uniform{{0.5, 0.0}};  // 0.5 * 0.5 >= 0.1: rejected
  VerifyOutcome outcome = verify({0}, q, target, uniform);
  EXPECT_EQ(outcome.n_accepted, 0);
  EXPECT_EQ(outcome.next_token, 2);  // residual {0, 0, 0.5, 0.5}, u = 0

  RecordingTarget bonus_target{{{0.1f, 0.1f, 0.4f, 0.4f}, {0.0f, 0.0f, 0.0f, 1.0f}}};
  ScriptedUniform accept{{0.1, 0.0}};  // 0.1 * 0.5 < 0.1
  outcome = verify({1}, q, bonus_target, accept);
  EXPECT_EQ(outcome.n_accepted, 1);
  EXPECT_EQ(outcome.next_token, 3);  // a token the draft cannot even name
}

TEST(VerifyStochastic, NoDraftTokensDrawsFromRowZero) {
  RecordingTarget target{{{0.0f, 0.0f, 1.0f}}};
  ScriptedUniform uniform{{0.3}};
  const VerifyOutcome outcome = verify({}, {}, target, uniform);
  EXPECT_EQ(outcome.n_accepted, 0);
  EXPECT_EQ(outcome.next_token, 2);
  EXPECT_EQ(target.asked, (std::vector<int32_t>{0}));
}

TEST(VerifyStochastic, RowsAreAskedLazilyInOrder) {
  // k = 4 with the second token rejected: rows 0 and 1 only, each once, in
  // order; row 1 only after token 0 was accepted (the caller records it
  // into its penalty state in between).
  const Row q_row = {0.25f, 0.25f, 0.25f, 0.25f};
  const std::vector<Row> q(4, q_row);
  const std::vector<int32_t> draft = {0, 1, 2, 3};
  const Row p_row = {0.25f, 0.0f, 0.25f, 0.5f};  // token 1 always rejected
  std::vector<int32_t> asked;
  std::vector<int32_t> recorded;  // the caller's penalty state
  int32_t last_row = -1;
  const std::function<std::span<const float>(int32_t)> target_row =
      [&](int32_t i) -> std::span<const float> {
    EXPECT_EQ(i, last_row + 1) << "rows in increasing order, each once";
    if (i >= 1) recorded.push_back(draft[i - 1]);  // token i - 1 was accepted
    last_row = i;
    asked.push_back(i);
    return p_row;
  };
  const std::vector<std::span<const float>> q_spans = spans(q);
  ScriptedUniform uniform{{0.0, 0.0, 0.5}};
  const VerifyOutcome outcome = verify_stochastic(draft, q_spans, target_row, std::ref(uniform));
  EXPECT_EQ(outcome.n_accepted, 1);
  EXPECT_EQ(asked, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(recorded, (std::vector<int32_t>{0}));
  // Residual max(0, p - q) = {0, 0, 0, 0.25}: token 3.
  EXPECT_EQ(outcome.next_token, 3);
  EXPECT_EQ(uniform.used, 3u);

  // All accepted: rows 0..k, the last for the bonus.
  asked.clear();
  recorded.clear();
  last_row = -1;
  const Row flat = q_row;
  const std::function<std::span<const float>(int32_t)> flat_row =
      [&](int32_t i) -> std::span<const float> {
    EXPECT_EQ(i, last_row + 1);
    if (i >= 1) recorded.push_back(draft[i - 1]);
    last_row = i;
    asked.push_back(i);
    return flat;
  };
  ScriptedUniform accept_all{{0.9, 0.9, 0.9, 0.9, 0.1}};
  const VerifyOutcome all = verify_stochastic(draft, q_spans, flat_row, std::ref(accept_all));
  EXPECT_EQ(all.n_accepted, 4);
  EXPECT_EQ(all.next_token, 0);
  EXPECT_EQ(asked, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(recorded, draft);
}

TEST(VerifyStochastic, MatchesTheTargetExactlyOnOneStep) {
  // The whole output law of one position, computed from the acceptance
  // rule: q(y) min(1, p(y) / q(y)) + P(reject) r(y) = p(y), checked by
  // integrating over u on a fine grid instead of sampling.
  const Row p = {0.1f, 0.4f, 0.2f, 0.3f, 0.0f};
  const Row q = {0.3f, 0.1f, 0.2f, 0.0f, 0.4f};
  std::vector<double> law(p.size(), 0.0);
  const int grid = 2000;  // acceptance uniforms
  const int draws = 10;   // residual uniforms: its CDF steps are multiples of 0.1
  for (int32_t x = 0; x < static_cast<int32_t>(q.size()); ++x) {
    if (q[x] == 0.0f) continue;
    for (int g = 0; g < grid; ++g) {
      const double u_accept = (g + 0.5) / grid;
      for (int h = 0; h < draws; ++h) {
        const double u_draw = (h + 0.5) / draws;
        RecordingTarget target{{p, p}};
        ScriptedUniform uniform{{u_accept, u_draw}};
        const VerifyOutcome outcome = verify({x}, {q}, target, uniform);
        const int32_t first = outcome.n_accepted == 1 ? x : outcome.next_token;
        law[first] += q[x] / grid / draws;
      }
    }
  }
  for (size_t y = 0; y < p.size(); ++y) EXPECT_NEAR(law[y], p[y], 1e-3) << "token " << y;
}

}  // namespace
}  // namespace specstack

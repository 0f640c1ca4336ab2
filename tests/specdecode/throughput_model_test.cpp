// The throughput model (seed 003) and the k policy built on it: expected
// tokens per verification, the predicted multiplier, the online cost fit,
// the acceptance estimate, and k = 0 where speculation would lose.
#include "specdecode/throughput_model.h"

#include <gtest/gtest.h>

#include <vector>

#include "specdecode/spec_length_policy.h"

namespace specstack {
namespace {

TEST(ThroughputModel, ExpectedTokensIsTheGeometricSum) {
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(0.8, 0), 1.0);
  EXPECT_NEAR(expected_tokens_per_step(0.8, 4), 1 + 0.8 + 0.64 + 0.512 + 0.4096, 1e-12);
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(1.0, 4), 5.0);
  EXPECT_DOUBLE_EQ(expected_tokens_per_step(0.0, 4), 1.0);
  EXPECT_NEAR(expected_accepted(0.5, 2), 0.75, 1e-12);
}

TEST(ThroughputModel, PredictedMultiplier) {
  SpecStepCosts costs;
  costs.target_step_seconds = 6e-3;
  costs.verify_step_seconds = 6.6e-3;
  costs.draft_step_seconds = 1e-3;
  // tau(0.8, 4) = 3.3616; step = 4 * 1 + 6.6 = 10.6 ms against 6 ms plain.
  EXPECT_NEAR(predicted_multiplier(0.8, 4, costs), 3.3616 * 6.0 / 10.6, 1e-9);
  EXPECT_DOUBLE_EQ(predicted_multiplier(0.8, 0, costs), 1.0);
  costs.overhead_seconds = 0.4e-3;
  EXPECT_NEAR(predicted_multiplier(0.8, 4, costs), 3.3616 * 6.0 / 11.0, 1e-9);
}

TEST(OnlineLinearFit, RecoversALineAndNeverSlopesDown) {
  OnlineLinearFit fit;
  EXPECT_TRUE(fit.empty());
  fit.add(1, 3.0);
  EXPECT_DOUBLE_EQ(fit.predict(100), 3.0);  // one x: the mean
  for (int x = 1; x <= 64; x *= 2) fit.add(x, 2.0 + 0.5 * x);
  EXPECT_NEAR(fit.predict(10), 7.0, 0.3);
  OnlineLinearFit falling;
  for (int x = 1; x <= 8; ++x) falling.add(x, 10.0 - x);
  EXPECT_GE(falling.predict(100), falling.predict(1) - 1e-9);
}

TEST(AcceptanceEstimate, ConvergesToThePerTokenRate) {
  AcceptanceEstimate estimate;
  EXPECT_NEAR(estimate.alpha(), 0.7, 1e-12);  // the prior
  // j accepted of 4 with a rejection after them: 3 of 4 trials succeed.
  for (int i = 0; i < 100; ++i) estimate.observe(3, 4);
  EXPECT_NEAR(estimate.alpha(), 0.75, 1e-3);
  for (int i = 0; i < 100; ++i) estimate.observe(0, 4);
  EXPECT_LT(estimate.alpha(), 0.01);
  for (int i = 0; i < 100; ++i) estimate.observe(4, 4);  // all accepted: no failure
  EXPECT_GT(estimate.alpha(), 0.99);
}

// Costs as a memory-bound GPU would show them: a step costs about the same
// for 1 or 5 rows per sequence at small batch, and grows with rows once the
// batch is large (compute-bound).
void teach(SpecLengthPolicy& policy, double fixed, double per_row, double draft_fixed,
           double draft_per_row) {
  for (int rows = 1; rows <= 1024; rows *= 2) {
    policy.observe_target_step(rows, fixed + per_row * rows);
    policy.observe_draft_step(rows, draft_fixed + draft_per_row * rows);
  }
}

TEST(SpecLengthPolicy, SpeculatesAtSmallBatchWithAGoodDraft) {
  SpecLengthPolicy policy(SpecLengthPolicyOptions{8, true, 0.1, 1.02});
  teach(policy, 6e-3, 1e-5, 0.8e-3, 1e-6);
  const std::vector<double> alphas = {0.8};
  const int32_t k = policy.choose(alphas, 0);
  EXPECT_GE(k, 3);
  EXPECT_LE(k, 8);
}

TEST(SpecLengthPolicy, TurnsItselfOffWhereItWouldLose) {
  SpecLengthPolicy policy(SpecLengthPolicyOptions{4, true, 0.1, 1.02});
  // Compute-bound: every row costs, so k + 1 rows per sequence cost k + 1 steps.
  teach(policy, 1e-4, 1e-4, 1e-4, 2e-5);
  const std::vector<double> many(128, 0.6);
  EXPECT_EQ(policy.choose(many, 0), 0);
  // A poor draft loses at any batch.
  SpecLengthPolicy poor(SpecLengthPolicyOptions{4, true, 0.1, 1.02});
  teach(poor, 6e-3, 1e-5, 2e-3, 1e-6);
  EXPECT_EQ(poor.choose(std::vector<double>{0.05}, 0), 0);
}

TEST(SpecLengthPolicy, ProbesAfterALongRunOfZeroAndFixedKIgnoresCosts) {
  SpecLengthPolicy policy(SpecLengthPolicyOptions{4, true, 0.1, 1.02});
  teach(policy, 6e-3, 1e-5, 2e-3, 1e-6);
  const std::vector<double> poor = {0.05};
  std::vector<int32_t> probe_steps;
  for (int i = 1; i <= 480; ++i) {
    if (policy.choose(poor, 0) > 0) probe_steps.push_back(i);
  }
  // One step at k = 1 after 32 steps at 0, then after 64, 128, 256: probes that
  // find nothing back off.
  EXPECT_EQ(probe_steps, (std::vector<int32_t>{32, 96, 224, 480}));
  // A good draft speculates again at once, and the interval starts over.
  EXPECT_GT(policy.choose(std::vector<double>{0.9}, 0), 0);
  probe_steps.clear();
  for (int i = 1; i <= 32; ++i) {
    if (policy.choose(poor, 0) > 0) probe_steps.push_back(i);
  }
  EXPECT_EQ(probe_steps, (std::vector<int32_t>{32}));
  SpecLengthPolicy fixed(SpecLengthPolicyOptions{4, false, 0.1, 1.02});
  EXPECT_EQ(fixed.choose(poor, 0), 4);
  EXPECT_EQ(fixed.choose({}, 0), 0);
}

}  // namespace
}  // namespace specstack

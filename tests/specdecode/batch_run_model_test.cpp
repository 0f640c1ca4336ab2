// The batch-run model: simulated per-request step counts costed at the
// batch still running (the drain tail bench spec's wall clock includes).
#include "specdecode/batch_run_model.h"

#include <gtest/gtest.h>

namespace specstack {
namespace {

BatchRunInputs inputs(int32_t batch, int32_t tokens, double alpha) {
  BatchRunInputs in;
  in.batch = batch;
  in.tokens_per_request = tokens;
  in.alpha = alpha;
  in.k = 4;
  in.at_batch.draft_step_seconds = 2e-3;
  in.at_batch.verify_step_seconds = 24e-3;
  in.at_batch.target_step_seconds = 18e-3;
  in.at_one.draft_step_seconds = 1e-3;
  in.at_one.verify_step_seconds = 8e-3;
  in.plain_step_seconds = 18e-3;
  return in;
}

TEST(BatchRunModel, StepCostIsLinearInTheRunningBatch) {
  const BatchRunInputs in = inputs(65, 10, 0.8);
  EXPECT_NEAR(step_seconds_at(in, 65), 4 * 2e-3 + 24e-3, 1e-12);
  EXPECT_NEAR(step_seconds_at(in, 1), 4 * 1e-3 + 8e-3, 1e-12);
  EXPECT_NEAR(step_seconds_at(in, 33), 4 * 1.5e-3 + 16e-3, 1e-12);
  BatchRunInputs first = in;  // a dearer catch-up forward first
  first.first_draft_at_batch = 3e-3;
  first.first_draft_at_one = 1.2e-3;
  EXPECT_NEAR(step_seconds_at(first, 65), 3e-3 + 3 * 2e-3 + 24e-3, 1e-12);
  EXPECT_NEAR(step_seconds_at(first, 1), 1.2e-3 + 3 * 1e-3 + 8e-3, 1e-12);
}

TEST(BatchRunModel, NoAcceptanceMeansNoTailAndOneTokenPerStep) {
  const BatchRunPrediction p = predict_batch_run(inputs(64, 127, 0.0));
  EXPECT_DOUBLE_EQ(p.mean_steps, 127.0);
  EXPECT_DOUBLE_EQ(p.mean_request_steps, 127.0);
  EXPECT_NEAR(p.multiplier, 18.0 / 32.0, 1e-12);
}

TEST(BatchRunModel, FullAcceptanceFinishesInCeilOfTokensOverKPlusOne) {
  BatchRunInputs in = inputs(8, 127, 1.0);
  const BatchRunPrediction p = predict_batch_run(in);
  EXPECT_DOUBLE_EQ(p.mean_steps, 26.0);  // 25 steps of 5 tokens, then the last 2
  EXPECT_NEAR(p.spec_seconds, 26 * 32e-3, 1e-12);
  in.admission_seconds = 26e-3;
  EXPECT_NEAR(predict_batch_run(in).spec_seconds, 26 * 32e-3 + 26e-3, 1e-12);
}

TEST(BatchRunModel, ALongSingleRequestMatchesTheSteadyModel) {
  BatchRunInputs in = inputs(1, 20000, 0.8);
  in.trials = 5;
  SpecStepCosts steady = in.at_batch;
  const double want = predicted_multiplier(0.8, 4, steady);
  EXPECT_NEAR(predict_batch_run(in).multiplier / want, 1.0, 0.01);
}

TEST(BatchRunModel, TheDrainTailCostsABatchMoreThanTheSteadyModelSays) {
  const BatchRunInputs in = inputs(64, 127, 0.8);
  const BatchRunPrediction p = predict_batch_run(in);
  const double steady = predicted_multiplier(0.8, 4, in.at_batch);
  // The slowest of 64 requests needs well over the mean's 127 / 3.36 steps.
  EXPECT_GT(p.mean_steps, p.mean_request_steps + 4);
  EXPECT_GT(p.mean_request_steps, 127 / expected_tokens_per_step(0.8, 4));
  EXPECT_LT(p.multiplier, 0.95 * steady);
  EXPECT_GT(p.multiplier, 0.7 * steady);
  // Deterministic for a seed.
  EXPECT_DOUBLE_EQ(predict_batch_run(in).multiplier, p.multiplier);
}

}  // namespace
}  // namespace specstack

#include "specdecode/throughput_model.h"

#include <algorithm>
#include <cmath>

namespace specstack {

double expected_tokens_per_step(double alpha, int32_t k) {
  if (k <= 0) return 1.0;
  if (alpha >= 1.0) return static_cast<double>(k + 1);
  if (alpha <= 0.0) return 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double predicted_multiplier(double alpha, int32_t k, const SpecStepCosts& costs) {
  const double step = (k > 0 ? k * costs.draft_step_seconds + costs.verify_step_seconds
                             : costs.target_step_seconds) +
                      costs.overhead_seconds;
  if (step <= 0) return 1.0;
  return expected_tokens_per_step(alpha, k) * costs.target_step_seconds / step;
}

void OnlineLinearFit::add(double x, double y) {
  n_ = decay_ * n_ + 1.0;
  sx_ = decay_ * sx_ + x;
  sy_ = decay_ * sy_ + y;
  sxx_ = decay_ * sxx_ + x * x;
  sxy_ = decay_ * sxy_ + x * y;
}

double OnlineLinearFit::predict(double x) const {
  if (n_ == 0.0) return 0.0;
  const double mean_x = sx_ / n_;
  const double mean_y = sy_ / n_;
  const double var_x = sxx_ / n_ - mean_x * mean_x;
  // One distinct x so far (or nearly): the mean is all there is to go on.
  if (var_x <= 1e-9 * (1.0 + mean_x * mean_x)) return mean_y;
  const double slope = (sxy_ / n_ - mean_x * mean_y) / var_x;
  // Step time never falls with more rows; a noisy fit must not say so.
  const double bounded = slope < 0 ? 0.0 : slope;
  const double intercept = mean_y - bounded * mean_x;
  return std::max(intercept + bounded * x, 0.0);
}

}  // namespace specstack

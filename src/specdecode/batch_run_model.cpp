#include "specdecode/batch_run_model.h"

#include <algorithm>
#include <random>
#include <vector>

namespace specstack {

namespace {

double lerp_batch(double at_one, double at_batch, int32_t batch, int32_t running) {
  if (batch <= 1) return at_batch;
  const double f = static_cast<double>(running - 1) / static_cast<double>(batch - 1);
  return at_one + (at_batch - at_one) * f;
}

}  // namespace

double step_seconds_at(const BatchRunInputs& in, int32_t running) {
  const double d =
      lerp_batch(in.at_one.draft_step_seconds, in.at_batch.draft_step_seconds, in.batch, running);
  const double t =
      lerp_batch(in.at_one.verify_step_seconds, in.at_batch.verify_step_seconds, in.batch, running);
  const double first =
      in.first_draft_at_batch > 0
          ? lerp_batch(in.first_draft_at_one, in.first_draft_at_batch, in.batch, running)
          : d;
  return (in.k > 0 ? first + (in.k - 1) * d : 0.0) + t + in.at_batch.overhead_seconds;
}

BatchRunPrediction predict_batch_run(const BatchRunInputs& in) {
  BatchRunPrediction out;
  out.plain_seconds = static_cast<double>(in.tokens_per_request) * in.plain_step_seconds;
  if (in.batch <= 0 || in.tokens_per_request <= 0 || in.trials <= 0) return out;
  std::mt19937_64 rng(in.seed);
  std::bernoulli_distribution accept(std::clamp(in.alpha, 0.0, 1.0));
  std::vector<int32_t> left(static_cast<size_t>(in.batch));
  double multiplier = 0, steps = 0, request_steps = 0, spec_seconds = 0;
  for (int32_t trial = 0; trial < in.trials; ++trial) {
    std::fill(left.begin(), left.end(), in.tokens_per_request);
    int32_t running = in.batch;
    double seconds = in.admission_seconds;
    int64_t n_steps = 0, n_request_steps = 0;
    while (running > 0) {
      seconds += step_seconds_at(in, running);
      ++n_steps;
      n_request_steps += running;
      for (int32_t& l : left) {
        if (l == 0) continue;
        const int32_t k = std::min(in.k, l - 1);  // the engine's cap: room for the bonus token
        int32_t j = 0;
        while (j < k && accept(rng)) ++j;
        l -= j + 1;
        if (l == 0) --running;
      }
    }
    multiplier += out.plain_seconds / seconds;
    steps += static_cast<double>(n_steps);
    request_steps += static_cast<double>(n_request_steps) / in.batch;
    spec_seconds += seconds;
  }
  out.multiplier = multiplier / in.trials;
  out.mean_steps = steps / in.trials;
  out.mean_request_steps = request_steps / in.trials;
  out.spec_seconds = spec_seconds / in.trials;
  return out;
}

}  // namespace specstack

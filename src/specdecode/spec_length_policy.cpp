#include "specdecode/spec_length_policy.h"

namespace specstack {

void AcceptanceEstimate::observe(int32_t n_accepted, int32_t n_drafted) {
  if (n_drafted <= 0) return;
  accepted_ = kDecay * accepted_ + n_accepted;
  trials_ = kDecay * trials_ + n_accepted + (n_accepted < n_drafted ? 1 : 0);
}

SpecLengthPolicy::SpecLengthPolicy(const SpecLengthPolicyOptions& options) : options_(options) {}

double SpecLengthPolicy::predicted_step_seconds(int32_t k, int32_t n_seqs,
                                                int32_t n_other_rows) const {
  const double rows = n_other_rows + static_cast<double>(n_seqs) * (k + 1);
  // Prior, before the engine has timed anything: verify rows are free and a
  // draft step costs draft_cost_prior of a decode step.
  const double target = target_.empty() ? 1.0 : target_.predict(rows);
  if (k == 0) return target;
  const double plain = target_.empty() ? 1.0 : target_.predict(n_other_rows + n_seqs);
  const double draft = draft_.empty() ? options_.draft_cost_prior * plain : draft_.predict(n_seqs);
  return k * draft + target;
}

int32_t SpecLengthPolicy::choose(std::span<const double> alphas, int32_t n_other_rows) {
  if (alphas.empty()) return 0;
  if (!options_.adaptive) return options_.max_k;
  const auto n_seqs = static_cast<int32_t>(alphas.size());
  const auto rate = [&](int32_t k) {
    double tokens = 0;
    for (double alpha : alphas) tokens += expected_tokens_per_step(alpha, k);
    return tokens / predicted_step_seconds(k, n_seqs, n_other_rows);
  };
  const double plain = rate(0);
  int32_t best_k = 0;
  double best = plain * options_.min_gain;
  for (int32_t k = 1; k <= options_.max_k; ++k) {
    const double r = rate(k);
    if (r > best) {
      best = r;
      best_k = k;
    }
  }
  if (best_k > 0) {
    n_steps_without_ = 0;
    probe_interval_ = kMinProbeInterval;
    return best_k;
  }
  // Acceptance estimates only move while sequences speculate: after a run at
  // k = 0, one probing step at k = 1 refreshes them. A probe is not free (the
  // draft first catches up on every token since the last one), so while
  // probes keep finding nothing the interval doubles.
  if (++n_steps_without_ >= probe_interval_) {
    n_steps_without_ = 0;
    probe_interval_ = std::min(2 * probe_interval_, kMaxProbeInterval);
    return 1;
  }
  return 0;
}

}  // namespace specstack

// SpecLengthPolicy: how many draft tokens (k in 0..K) the sequences that
// speculate propose in one engine step. Speculation pays only when the
// expected extra tokens outweigh the draft steps and the wider verify step;
// with a large batch, short contexts or a poor draft it loses, and then the
// policy answers 0 so the step is a plain decode.
//
// Costs are learnt online from the engine's own step times (a line per
// model: seconds against rows in the step), starting from a prior in which a
// draft step costs `draft_cost_prior` target decode steps and verify rows are
// free (the memory-bound regime). Acceptance comes from each sequence's
// running estimate (AcceptanceEstimate below).
#pragma once

#include <cstdint>
#include <span>

#include "specdecode/throughput_model.h"

namespace specstack {

// A sequence's per-token acceptance rate under the i.i.d. model: each
// verification that accepts j of k draft tokens is j successes and, when
// j < k, one failure. Old evidence decays so the estimate follows the text.
class AcceptanceEstimate {
 public:
  void observe(int32_t n_accepted, int32_t n_drafted);
  double alpha() const { return accepted_ / trials_; }

 private:
  static constexpr double kDecay = 0.9;
  double accepted_ = 1.4;  // prior: alpha 0.7 worth two trials
  double trials_ = 2.0;
};

struct SpecLengthPolicyOptions {
  int32_t max_k = 4;              // K
  bool adaptive = true;           // false: always K
  double draft_cost_prior = 0.1;  // a draft step in target decode steps (weight bytes ratio)
  double min_gain = 1.02;         // speculate only when the predicted rate beats plain by this
};

class SpecLengthPolicy {
 public:
  explicit SpecLengthPolicy(const SpecLengthPolicyOptions& options);

  // One draft forward with `n_rows` rows took `seconds`.
  void observe_draft_step(int32_t n_rows, double seconds) { draft_.add(n_rows, seconds); }
  // One target step with `n_rows` rows took `seconds`.
  void observe_target_step(int32_t n_rows, double seconds) { target_.add(n_rows, seconds); }

  // k for this step: `alphas` of the sequences that may speculate, `n_other_rows`
  // rows the step carries anyway (prefill chunks, plain decodes).
  int32_t choose(std::span<const double> alphas, int32_t n_other_rows);

  // The predicted step time with k draft tokens for `n_seqs` speculating
  // sequences (the model choose() maximises tokens / time with).
  double predicted_step_seconds(int32_t k, int32_t n_seqs, int32_t n_other_rows) const;

 private:
  SpecLengthPolicyOptions options_;
  OnlineLinearFit draft_;
  OnlineLinearFit target_;
  static constexpr int32_t kMinProbeInterval = 32;
  static constexpr int32_t kMaxProbeInterval = 1024;
  int32_t n_steps_without_ = 0;                 // consecutive steps at k = 0 (for probing)
  int32_t probe_interval_ = kMinProbeInterval;  // steps at k = 0 before the next probe
};

}  // namespace specstack

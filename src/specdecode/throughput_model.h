// The throughput model of one speculative step (SPIRe, seed 003): a step with
// k draft tokens costs k draft forwards plus one target forward over k + 1
// rows per sequence, and yields tau(alpha, k) tokens per sequence. The
// throughput multiplier over plain decoding is
//     tau(alpha, k) * T(B, 1) / (k * D(B) + T(B, k + 1))
// with T(B, r) the target step time for batch B at r rows per sequence and
// D(B) a draft step for batch B, both measured at the same context length.
// `bench spec` measures D and T, predicts the multiplier with this and
// prints it beside the measured one; the engine's SpecLengthPolicy uses the
// same expressions with costs it learns online.
#pragma once

#include <cstdint>

namespace specstack {

// Expected tokens one verification yields with k draft tokens when each is
// accepted independently with probability alpha (Leviathan et al.):
// 1 + alpha + ... + alpha^k (the accepted prefix plus the bonus/residual token).
double expected_tokens_per_step(double alpha, int32_t k);

// Expected accepted draft tokens per verification: tau - 1.
inline double expected_accepted(double alpha, int32_t k) {
  return expected_tokens_per_step(alpha, k) - 1.0;
}

// Measured costs of one step at one batch size and context length.
struct SpecStepCosts {
  double draft_step_seconds = 0;   // D(B): one draft forward, one row per sequence
  double target_step_seconds = 0;  // T(B, 1): one plain decode step
  double verify_step_seconds = 0;  // T(B, k + 1): the verify step at this k
  double overhead_seconds = 0;     // per step: sampling, verification, rollback
};

// tau * T(B, 1) / (k * D + T(B, k + 1) + overhead).
double predicted_multiplier(double alpha, int32_t k, const SpecStepCosts& costs);

// A line y = a + b x fitted online by least squares with exponential
// forgetting, so it follows the costs as contexts grow. Until it has seen two
// distinct x it predicts from the last sample (or the prior).
class OnlineLinearFit {
 public:
  explicit OnlineLinearFit(double decay = 0.98) : decay_(decay) {}
  void add(double x, double y);
  bool empty() const { return n_ == 0.0; }
  double predict(double x) const;

 private:
  double decay_;
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

}  // namespace specstack

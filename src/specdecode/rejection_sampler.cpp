#include "specdecode/rejection_sampler.h"

#include <algorithm>

#include "base/check.h"

namespace specstack {

namespace {

// Probability of `token` under `probs`; tokens beyond the vector have none.
double prob_of(std::span<const float> probs, int32_t token) {
  return token >= 0 && static_cast<size_t>(token) < probs.size() ? probs[token] : 0.0;
}

}  // namespace

VerifyOutcome verify_greedy(std::span<const int32_t> draft_tokens,
                            std::span<const int32_t> target_argmax) {
  SS_CHECK_EQ(target_argmax.size(), draft_tokens.size() + 1);
  VerifyOutcome outcome;
  while (static_cast<size_t>(outcome.n_accepted) < draft_tokens.size() &&
         draft_tokens[outcome.n_accepted] == target_argmax[outcome.n_accepted]) {
    ++outcome.n_accepted;
  }
  outcome.next_token = target_argmax[outcome.n_accepted];
  return outcome;
}

VerifyOutcome verify_stochastic(std::span<const int32_t> draft_tokens,
                                std::span<const std::span<const float>> draft_probs,
                                const std::function<std::span<const float>(int32_t)>& target_row,
                                const std::function<double()>& uniform) {
  SS_CHECK_EQ(draft_probs.size(), draft_tokens.size());
  const int32_t k = static_cast<int32_t>(draft_tokens.size());
  VerifyOutcome outcome;
  for (int32_t i = 0; i < k; ++i) {
    const std::span<const float> p = target_row(i);
    const int32_t token = draft_tokens[i];
    // u * q < p instead of u < p / q: no division, and q(x) = 0 (a draft that
    // could not have drawn x) accepts whenever p(x) > 0, as min(1, p / 0) says.
    const double q_token = prob_of(draft_probs[i], token);
    if (uniform() * q_token < prob_of(p, token)) {
      ++outcome.n_accepted;
      continue;
    }
    // Only on a rejection, which is the rarer case when the draft is good:
    // one [vocab] buffer per rejected step, nothing per accepted token.
    std::vector<float> residual;
    residual_distribution(p, draft_probs[i], residual);
    outcome.next_token = draw_from(residual, uniform());
    return outcome;
  }
  outcome.next_token = draw_from(target_row(k), uniform());
  return outcome;
}

void residual_distribution(std::span<const float> p, std::span<const float> q,
                           std::vector<float>& out) {
  SS_CHECK(!p.empty());
  out.resize(p.size());
  // Differences of floats are exact in double, and so is every partial sum
  // worth keeping: the mass left after subtracting q can be tiny.
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double q_i = i < q.size() ? q[i] : 0.0;
    total += std::max(0.0, static_cast<double>(p[i]) - q_i);
  }
  if (total > 0.0) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double q_i = i < q.size() ? q[i] : 0.0;
      out[i] = static_cast<float>(std::max(0.0, static_cast<double>(p[i]) - q_i) / total);
    }
    return;
  }
  // p <= q everywhere means p == q (both sum to 1) up to rounding, where a
  // rejection has probability 0; if rounding caused one anyway, p is the
  // distribution that keeps the output exact.
  double p_total = 0.0;
  for (float p_i : p) p_total += p_i;
  SS_CHECK_GT(p_total, 0.0);
  for (size_t i = 0; i < p.size(); ++i) out[i] = static_cast<float>(p[i] / p_total);
}

int32_t draw_from(std::span<const float> probs, double u) {
  SS_CHECK(!probs.empty());
  double total = 0.0;
  for (float prob : probs) total += prob;
  SS_CHECK_GT(total, 0.0);
  const double target = u * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    // A zero entry never crosses the target: the sum before it did not.
    cumulative += probs[i];
    if (cumulative > target) return static_cast<int32_t>(i);
  }
  // target rounded up to the total: the last token with any probability.
  size_t last = probs.size() - 1;
  while (last > 0 && !(probs[last] > 0.0f)) --last;
  return static_cast<int32_t>(last);
}

}  // namespace specstack

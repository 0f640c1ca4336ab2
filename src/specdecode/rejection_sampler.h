// Verifying draft tokens against the target model: the exact sampling math of
// speculative decoding, on processed distributions (after penalties,
// temperature, top-k, top-p, min-p), independent of models and the engine.
//
// Why the output is distributed exactly as the target's (Leviathan et al.
// 2023, Chen et al. 2023). Let p be the target's distribution at a position and
// q the draft's, x ~ q the draft token. x is accepted with probability
// min(1, p(x) / q(x)); otherwise the token comes from the residual
// r = max(0, p - q) / (1 - beta), with beta = sum_y min(p(y), q(y)) the total
// acceptance probability. So
//   P(emit y) = q(y) min(1, p(y) / q(y)) + (1 - beta) r(y)
//             = min(p(y), q(y)) + max(0, p(y) - q(y)) = p(y).
// Position i + 1 is reached only when position i's draft token was accepted,
// and its p is the target's distribution after that token, so by induction the
// emitted sequence has the target's joint distribution; when all k tokens are
// accepted the bonus token is a plain draw from the target's next row. This
// needs the uniforms to be independent of the draft's draws: the draft must
// not share the verifier's random stream.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace specstack {

struct VerifyOutcome {
  int32_t n_accepted = 0;   // leading draft tokens accepted (0..k)
  int32_t next_token = -1;  // the token after them: the residual draw on rejection, the bonus
                            // when all k were accepted
};

// Greedy: draft_tokens [k], target_argmax [k + 1] (row i = the target's argmax
// after the prefix ending with draft token i - 1). Accepts the longest prefix
// where draft_tokens[i] == target_argmax[i]; next_token = target_argmax[n_accepted].
VerifyOutcome verify_greedy(std::span<const int32_t> draft_tokens,
                            std::span<const int32_t> target_argmax);

// Modified rejection sampling. draft_tokens [k]; draft_probs[i] [vocab_q] is
// the distribution draft token i was drawn from; target_row(i) returns the
// target's processed distribution [vocab_p] for row i (i = 0..k), valid until
// the next call. vocab_q may be smaller than vocab_p (missing entries are
// probability 0); p entries beyond vocab_p are 0 too. uniform() returns [0, 1).
//
// Contract: target_row is called with i = 0, 1, 2, ... in increasing order, at
// most once each, and target_row(i) for i >= 1 only after draft token i - 1
// was accepted, so the caller can record accepted tokens into its penalty
// state lazily (before answering row i).
//
// Token i is accepted iff u * q(x) < p(x), i.e. with probability
// min(1, p(x) / q(x)); on the first rejection next_token is drawn from
// norm(max(0, p - q)) (from p if that is all zero, which only rounding can
// cause); if all k are accepted next_token is drawn from target_row(k).
// uniform() is called once per examined draft token and once for next_token.
VerifyOutcome verify_stochastic(std::span<const int32_t> draft_tokens,
                                std::span<const std::span<const float>> draft_probs,
                                const std::function<std::span<const float>(int32_t)>& target_row,
                                const std::function<double()>& uniform);

// out [vocab_p] = max(0, p - q) normalised to sum 1 (q shorter than p: the
// missing entries are 0). When p <= q everywhere (p == q up to rounding), out
// is p normalised instead, so the result is always a distribution.
void residual_distribution(std::span<const float> p, std::span<const float> q,
                           std::vector<float>& out);

// Inverse CDF: the first token whose cumulative probability exceeds
// u * sum(probs), summed in double, so probs need not sum to exactly 1. If
// rounding lets the target reach the total, the last token with positive
// probability; a zero-probability token is never returned. probs must have a
// positive entry.
int32_t draw_from(std::span<const float> probs, double u);

}  // namespace specstack

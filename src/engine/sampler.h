// Sampler: turns one row of logits into a token for one sequence. It owns the
// sequence's RNG and token counts, so sampling is reproducible per request
// (same seed, same logits -> same tokens) whatever else is in the batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"
#include "model/row_sampling.h"

namespace specstack {

class Sampler {
 public:
  // prompt_ids feed the repetition penalty; outputs are added by sample().
  // Copyable: a copy carries the penalty state and the RNG (reseed() the copy
  // when its draws must be independent of the original's).
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt_ids);

  // Applies penalties, temperature, top-k, top-p, min-p (in that order, as
  // vLLM does) and draws a token. `logits` [vocab] is modified in place.
  // Records the token as an output token.
  int32_t sample(std::span<float> logits);

  // The distribution sample() draws from, as probabilities [vocab] summing
  // to 1: the same candidate set and weights, zero elsewhere; one-hot at the
  // token sample() would pick when it is greedy (or nothing is finite).
  // Records nothing and leaves the RNG alone; `logits` [vocab] is modified in
  // place (penalties, NaN -> -inf). Speculative decoding compares these.
  void distribution(std::span<float> logits, std::vector<float>& probs);

  // Inverse-CDF draw from `probs` [vocab] with this sampler's RNG (one
  // uniform()), in token id order; records nothing. On the dense path (no
  // top-k / top-p) draw(distribution(l)) picks sample(l)'s token except when
  // the uniform lands within rounding of a CDF step; with top-k / top-p,
  // sample() walks the candidates best first, so only the distribution agrees.
  int32_t draw(std::span<const float> probs);

  // sample() for a model that picks the token itself (StepPlan::sampling):
  // the temperature / top-k / top-p / min-p of this request and the uniform
  // sample() would draw now (consumed); greedy: the argmax. Penalties are
  // not in it (the caller keeps penalised rows on the host) and nothing is
  // recorded.
  RowSampling device_draw();

  // One [0, 1) draw from the RNG: the top 53 bits, so it does not depend on
  // the standard library's distribution implementation.
  double uniform();

  // The request's rule without a draw (temperature, top-k, top-p, min-p;
  // greedy: the argmax's), for a model that verifies its speculation itself.
  RowSampling device_rule() const;
  // The next n uniform() draws as the device reads them (fp32, below 1),
  // without consuming them; skip_uniforms(m) then consumes the m the device used.
  std::vector<float> peek_uniforms(int32_t n) const;
  void skip_uniforms(int32_t n);

  // Counts `token` as generated output for the penalties, as sample() does
  // for its own draws (for tokens chosen elsewhere, e.g. accepted drafts).
  void record_output(int32_t token);

  void reseed(uint64_t seed) { rng_.seed(seed); }
  bool greedy() const;  // temperature below kGreedyTemperature: argmax, no RNG

  // The penalty step of sample() on its own (repetition over prompt + output,
  // then frequency/presence over output), exposed so tests can check values.
  void apply_penalties(std::span<float> logits) const;

 private:
  // The candidate set that sample() draws from. Dense: every token i with
  // weight scratch_[i] (min-p already zeroed) and their sum `total`; otherwise
  // order_[0, n) with weights scratch_[order_[j]].
  struct Candidates {
    bool dense = false;
    size_t n = 0;
    double total = 0.0;  // dense only, summed in token order as the draw sums
  };

  void track_vocab(size_t vocab);
  void record(int32_t token);
  static double uniform_of(std::mt19937_64& rng);  // uniform()'s rule on any generator
  // Penalties, NaN -> -inf; returns the argmax (ties to the lowest id) and
  // sets max_logit. Shared by sample() and distribution().
  int32_t prepare(std::span<float> logits, float& max_logit);
  // Picks the fast path for these params; max_logit is finite or +inf.
  Candidates weigh(std::span<const float> logits, float max_logit);
  // The three ways to weigh after temperature; each applies min-p last.
  // No top-k / top-p: one pass over the vocab, nothing sorted.
  double weigh_dense(std::span<const float> logits, float max_logit, float inv_temperature);
  // top-k (then top-p within it): only the k best are selected and sorted.
  size_t weigh_top_k(std::span<const float> logits, float max_logit, float inv_temperature);
  // top-p alone: only the tokens at the edge of the nucleus are sorted.
  size_t weigh_top_p(std::span<const float> logits, float max_logit, float inv_temperature);
  // Fills order_ with the k best tokens, sorted, without sorting the vocab.
  void select_top(std::span<const float> logits, size_t k);
  // Drops order_[0, n) entries below min-p; returns the new n (>= 1).
  size_t apply_min_p(size_t n);
  // Draws token i with probability scratch_[i] / total, i in [0, vocab).
  int32_t draw_dense(size_t vocab, double total);
  // Draws one of order_[0, n) with probability proportional to scratch_.
  int32_t draw_among(size_t n);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times generated
  std::vector<int32_t> seen_tokens_;                    // prompt + output, deduplicated
  std::vector<uint8_t> seen_mask_;                      // grows with vocab on first use
  std::vector<float> scratch_;  // [vocab] exp((logit - max) / T) by token id; max -> 1
  std::vector<int32_t> order_;  // [<= vocab] candidate token ids (best first once sorted)
};

// Watches the detokenized output for stop strings. push() returns the text that
// is safe to emit now (text that could still become the start of a stop string
// is held back); once a stop string is seen, stopped() is true and the text up
// to (not including) the stop string has been emitted.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);
  std::string push(const std::string& text);
  std::string flush();  // end of generation without a stop: release held text
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace specstack

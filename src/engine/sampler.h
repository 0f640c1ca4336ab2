// Sampler: turns one row of logits into a token for one sequence. It owns the
// sequence's RNG and token counts, so sampling is reproducible per request
// (same seed, same logits -> same tokens) whatever else is in the batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"

namespace specstack {

class Sampler {
 public:
  // prompt_ids feed the repetition penalty; outputs are added by sample().
  Sampler(const SamplingParams& params, std::span<const int32_t> prompt_ids);

  // Applies penalties, temperature, top-k, top-p, min-p (in that order, as
  // vLLM does) and draws a token. `logits` [vocab] is modified in place.
  // Records the token as an output token.
  int32_t sample(std::span<float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;  // token -> times generated
  std::vector<int32_t> seen_tokens_;                     // prompt + output, deduplicated
  std::vector<uint8_t> seen_mask_;                       // grows with vocab on first use
  std::vector<float> scratch_;
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

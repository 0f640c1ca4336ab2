#include "engine/sampling_params.h"

#include <cmath>
#include <cstddef>

namespace specstack {

namespace {

// vLLM caps stop strings too: each one is searched on every decoded chunk.
constexpr size_t kMaxStopStrings = 16;

}  // namespace

Status SamplingParams::validate() const {
  // Comparisons are written so that NaN fails them.
  if (!std::isfinite(temperature) || !(temperature >= 0.0f)) {
    return errorf("temperature must be a finite number >= 0, got {}", temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return errorf("top_p must be in (0, 1], got {}", top_p);
  }
  if (top_k < -1) {
    return errorf("top_k must be >= -1 (0 or -1 disables it), got {}", top_k);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return errorf("min_p must be in [0, 1], got {}", min_p);
  }
  if (!std::isfinite(repetition_penalty) || !(repetition_penalty > 0.0f)) {
    return errorf("repetition_penalty must be a finite number > 0, got {}", repetition_penalty);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return errorf("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return errorf("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  if (max_tokens < 1) {
    return errorf("max_tokens must be >= 1, got {}", max_tokens);
  }
  if (stop_strings.size() > kMaxStopStrings) {
    return errorf("stop_strings may hold at most {} strings, got {}", kMaxStopStrings,
                  stop_strings.size());
  }
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    // An empty stop string would match before the first token.
    if (stop_strings[i].empty()) return errorf("stop_strings[{}] must not be empty", i);
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      return errorf("stop_token_ids[{}] must be >= 0, got {}", i, stop_token_ids[i]);
    }
  }
  return Status::ok_status();
}

}  // namespace specstack

// Per-request sampling options (OpenAI-style names) and their validation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace specstack {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;                // <= 0: off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]: drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;  // > 0; HF/CTRL style over prompt + output tokens
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI style over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI style over output tokens
  std::optional<uint64_t> seed;     // reproducible sampling when set
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;    // in addition to the model's EOS ids
  std::vector<std::string> stop_strings;  // matched on the detokenized output
  bool ignore_eos = false;

  // Ranges as documented above; the message names the field and the value.
  Status validate() const;
  // Any of the three penalties is on: sampling then needs the row's logits
  // and the sequence's token counts on the host.
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

}  // namespace specstack

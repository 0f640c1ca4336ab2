// Request parameters the engine tests share.
#pragma once

#include <cstdint>

#include "engine/sampling_params.h"

namespace specstack::testing {

// Greedy decoding of exactly max_tokens tokens (EOS ignored).
inline SamplingParams greedy(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

}  // namespace specstack::testing

// Log-probabilities of the model's raw distribution (before penalties and
// temperature, as vLLM reports them by default) for OpenAI logprobs fields.
#pragma once

#include <cstdint>

#include "engine/engine_api.h"
#include "model/row_logprobs.h"

namespace specstack {

// logits [vocab]; returns the chosen token's logprob and the top_n best
// alternatives in descending order (ties to the lower id).
// (model/row_logprobs.h's row_logprobs, as the API's type.)
TokenLogprob compute_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n);

// The API's type for a token's logprobs a model computed (RowLogprobs).
TokenLogprob to_token_logprob(int32_t token, RowLogprobs row);

}  // namespace specstack

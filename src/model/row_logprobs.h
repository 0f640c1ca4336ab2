// RowLogprobs: what a request asking for logprobs gets for one token, of the
// model's raw distribution (before penalties, temperature and grammar
// masks, as vLLM reports them by default): the token's log-probability and
// the top_n most likely tokens' in descending order (ties to the lower id).
// row_logprobs computes them on the host; a model that picks tokens itself
// computes them where the logits are (cuda/logprobs.h on the GPU) so the
// row's logits need not come down.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace specstack {

struct RowLogprobs {
  float logprob = 0;                           // the token's
  std::vector<std::pair<int32_t, float>> top;  // [top_n] (id, logprob), best first
};

// logits [vocab] (NaN counts as log-probability -inf and is left out of the
// normaliser, which is summed in double).
RowLogprobs row_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n);

}  // namespace specstack

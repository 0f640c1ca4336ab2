#include "engine/logprobs.h"

#include "model/row_logprobs.h"

namespace specstack {

TokenLogprob to_token_logprob(int32_t token, RowLogprobs row) {
  TokenLogprob out;
  out.token = token;
  out.logprob = row.logprob;
  out.top = std::move(row.top);
  return out;
}

TokenLogprob compute_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n) {
  return to_token_logprob(token, row_logprobs(logits, vocab, token, top_n));
}

}  // namespace specstack

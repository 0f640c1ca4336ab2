// Token importance for speculative prefill (ALGORITHM.md step 3): how much
// the draft's lookahead queries attend to each prompt token.
//
// For every full-attention layer l, query head h and step t:
//   A[l,h,t] = softmax(q[l,t,h] . K[l, h / (H/Hkv)]^T / sqrt(D))   over the M prompt keys, fp32
//   P[l,h,t] = avg_pool1d(A[l,h,t], kernel, stride 1, zero padding kernel/2, divisor kernel)
//   I[j]     = mean_t ( max_{l,h} P[l,h,t][j] )
// Sliding-window layers (capture.layer_window > 0) are skipped.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "specprefill/attention_capture.h"
#include "specprefill/prompt_keys.h"

namespace specstack {

class ThreadPool;

struct ScoreParams {
  // Width of the average pooling along the token axis; odd, so the output has
  // one value per token. 1 disables pooling.
  int64_t pool_kernel = 13;
  // Work is split across this pool; nullptr runs on the calling thread.
  ThreadPool* pool = nullptr;
};

// Returns I [keys.n_tokens()]. Errors (the caller falls back to a full
// prefill) when the capture and the keys disagree in shape, the pooling
// width is not a positive odd number, every layer is sliding-window, or a
// score comes out non-finite.
//
// Memory: one (layer, kv head) is scored at a time, holding its
// (H/Hkv * n_steps) softmax rows of M floats plus an [n_steps, M] running max,
// never the whole [layers * heads, steps, M] attention tensor.
Result<std::vector<float>> score_tokens(const AttentionCapture& capture, const PromptKeys& keys,
                                        const ScoreParams& params);

}  // namespace specstack

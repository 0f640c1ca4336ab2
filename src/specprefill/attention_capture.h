// AttentionCapture: the draft model's post-RoPE queries (post q_norm where the
// architecture has one) for the lookahead steps of speculative prefill
// (ALGORITHM.md step 2). The draft's forward fills it; the scorer reads it.
// Step 0 is the last prompt token's query from the prefill pass, steps
// 1..n_steps-1 those of the greedily generated draft tokens as they are fed
// back. Capture stops early at EOS, hence keep_first_steps().
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"
#include "base/status.h"

namespace specstack {

struct AttentionCapture {
  int64_t n_layers = 0;
  int64_t n_steps = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  std::vector<float> queries;         // [n_layers, n_steps, n_heads, head_dim] f32
  std::vector<int64_t> layer_window;  // [n_layers]: 0 = full attention, else sliding width

  // Zero queries, every layer full attention.
  static AttentionCapture zeros(int64_t n_layers, int64_t n_steps, int64_t n_heads,
                                int64_t head_dim);

  // [n_heads, head_dim] for one layer and step.
  float* query(int64_t layer, int64_t step) { return queries.data() + offset(layer, step); }
  const float* query(int64_t layer, int64_t step) const {
    return queries.data() + offset(layer, step);
  }
  // A sliding-window layer never sees the whole prompt, so its attention says
  // nothing about distant tokens: the scorer skips it.
  bool is_sliding(int64_t layer) const {
    SS_CHECK_LT(layer, static_cast<int64_t>(layer_window.size()));
    return layer_window[static_cast<size_t>(layer)] > 0;
  }
  // The widest sliding window of any layer (0 when none): the selector keeps
  // the last that many positions so those layers see valid recent context.
  int64_t max_window() const;

  // Keeps steps [0, n) of every layer (the draft hit EOS after n steps).
  void keep_first_steps(int64_t n);

  // The sizes agree with each other and with the buffers. The scorer calls it,
  // so a miswired capture makes speculative prefill fall back, not crash.
  Status validate() const;

 private:
  int64_t offset(int64_t layer, int64_t step) const {
    SS_CHECK(layer >= 0 && layer < n_layers);
    SS_CHECK(step >= 0 && step < n_steps);
    return (layer * n_steps + step) * n_heads * head_dim;
  }
};

}  // namespace specstack

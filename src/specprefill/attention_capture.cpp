#include "specprefill/attention_capture.h"

#include <algorithm>
#include <cstring>

namespace specstack {

AttentionCapture AttentionCapture::zeros(int64_t n_layers, int64_t n_steps, int64_t n_heads,
                                         int64_t head_dim) {
  SS_CHECK(n_layers >= 0 && n_steps >= 0 && n_heads >= 0 && head_dim >= 0);
  AttentionCapture capture;
  capture.n_layers = n_layers;
  capture.n_steps = n_steps;
  capture.n_heads = n_heads;
  capture.head_dim = head_dim;
  capture.queries.assign(static_cast<size_t>(n_layers * n_steps * n_heads * head_dim), 0.0f);
  capture.layer_window.assign(static_cast<size_t>(n_layers), 0);
  return capture;
}

int64_t AttentionCapture::max_window() const {
  int64_t widest = 0;
  for (int64_t window : layer_window) widest = std::max(widest, window);
  return widest;
}

void AttentionCapture::keep_first_steps(int64_t n) {
  SS_CHECK(n >= 0 && n <= n_steps);
  if (n == n_steps) return;
  // Steps are the second axis, so each layer's first n steps move down to
  // close the gap; the destination never overtakes the source.
  const int64_t step_floats = n_heads * head_dim;
  for (int64_t l = 0; l < n_layers; ++l) {
    std::memmove(queries.data() + l * n * step_floats, queries.data() + l * n_steps * step_floats,
                 static_cast<size_t>(n * step_floats) * sizeof(float));
  }
  n_steps = n;
  queries.resize(static_cast<size_t>(n_layers * n_steps * step_floats));
}

Status AttentionCapture::validate() const {
  if (n_layers <= 0 || n_steps <= 0 || n_heads <= 0 || head_dim <= 0) {
    return errorf(
        "attention capture: n_layers {}, n_steps {}, n_heads {}, head_dim {} must all be > 0",
        n_layers, n_steps, n_heads, head_dim);
  }
  const int64_t expected = n_layers * n_steps * n_heads * head_dim;
  if (static_cast<int64_t>(queries.size()) != expected) {
    return errorf("attention capture: queries holds {} floats, expected {} ({}x{}x{}x{})",
                  queries.size(), expected, n_layers, n_steps, n_heads, head_dim);
  }
  if (static_cast<int64_t>(layer_window.size()) != n_layers) {
    return errorf("attention capture: layer_window has {} entries, expected n_layers {}",
                  layer_window.size(), n_layers);
  }
  for (size_t l = 0; l < layer_window.size(); ++l) {
    if (layer_window[l] < 0) {
      return errorf("attention capture: layer_window[{}] = {} is negative", l, layer_window[l]);
    }
  }
  return Status::ok_status();
}

}  // namespace specstack

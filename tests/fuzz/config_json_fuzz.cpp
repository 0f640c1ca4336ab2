// libFuzzer target: parse_model_config on arbitrary bytes. An accepted config
// must also hold the invariants the model code divides and indexes by.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  specstack::Result<specstack::ModelConfig> config = specstack::parse_model_config(text);
  if (!config.ok()) {
    if (config.message().empty()) std::abort();
    return 0;
  }
  const specstack::ModelConfig& c = *config;
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.n_layers <= 0 || c.n_heads <= 0 ||
      c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0 || c.head_dim <= 0 ||
      c.head_dim % 2 != 0 || c.max_position_embeddings <= 0 || !(c.rope.theta > 0) ||
      !(c.rms_norm_eps > 0) || c.sliding_window < 0) {
    std::abort();
  }
  if (c.rope.type == specstack::RopeType::kRopeLlama3 &&
      !(c.rope.high_freq_factor > c.rope.low_freq_factor && c.rope.factor > 0)) {
    std::abort();
  }
  bool any_dense = false;
  for (int64_t layer = 0; layer < c.n_layers && layer < 4096; ++layer) {
    if (!c.layer_is_moe(layer)) any_dense = true;
  }
  if (any_dense && c.n_layers <= 4096 && c.intermediate_size <= 0) std::abort();
  if (c.moe.n_experts > 0 &&
      (c.moe.n_experts_per_token <= 0 || c.moe.n_experts_per_token > c.moe.n_experts ||
       c.moe.expert_intermediate_size <= 0)) {
    std::abort();
  }
  return 0;
}

#include "model/quant_mix.h"

#include <cstdlib>

namespace specstack {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The layer of "model.layers.<i>.…", or -1.
int64_t layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  char* end = nullptr;
  const long value = std::strtol(name.c_str() + prefix.size(), &end, 10);
  return end != nullptr && *end == '.' ? value : -1;
}

}  // namespace

bool use_more_bits(int64_t layer, int64_t n_layers) {
  const int64_t eighth = n_layers / 8;
  return layer < eighth || layer >= 7 * n_layers / 8 || (layer - eighth) % 3 == 2;
}

DType quant_mix_type(const std::string& name, const QuantMixContext& context) {
  if (context.quantization != WeightQuantization::kQ4_K) return DType::kQ8_0;
  if (name == "lm_head.weight") return DType::kQ6_K;
  if (name == "model.embed_tokens.weight")
    return context.tied_embeddings ? DType::kQ6_K : DType::kQ4_K;
  const int64_t layer = layer_of(name);
  // Every expert's down_proj of a layer counts as that layer's ffn_down.
  const bool more_bits_kind =
      ends_with(name, ".self_attn.v_proj.weight") || ends_with(name, "down_proj.weight");
  if (more_bits_kind && layer >= 0 && use_more_bits(layer, context.n_layers)) return DType::kQ6_K;
  return DType::kQ4_K;
}

}  // namespace specstack

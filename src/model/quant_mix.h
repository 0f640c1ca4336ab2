// Which block format each matrix of an HF checkpoint takes under
// --quantization (the mix), as a pure function of its name, so the rule is
// testable apart from the loading. q4_k follows llama.cpp's Q4_K_M recipe
// (src/llama-quant.cpp, for dense and MoE models without 8 experts): the
// output at Q6_K, attn_v and ffn_down at Q6_K in the layers
// use_more_bits() picks (about half), everything else Q4_K.
#pragma once

#include <cstdint>
#include <string>

#include "model/weights.h"
#include "tensor/dtype.h"

namespace specstack {

// llama.cpp's rule for where Q4_K_M spends more bits: the first and last
// eighth of the layers and every third layer in between.
bool use_more_bits(int64_t layer, int64_t n_layers);

struct QuantMixContext {
  WeightQuantization quantization = WeightQuantization::kNone;
  int64_t n_layers = 0;
  bool tied_embeddings = false;
};

// The format `name` (an HF tensor name of a 2-D weight other than the MoE
// router) should take, before the row-length fallbacks: kQ8_0 for every
// matrix under q8_0; under q4_k: kQ6_K for lm_head.weight (and for a tied
// embedding, which is the output too), self_attn.v_proj and the (expert)
// down_proj of use_more_bits layers; kQ4_K for the rest (an untied
// embedding included, as Q4_K_M files have it).
DType quant_mix_type(const std::string& name, const QuantMixContext& context);

}  // namespace specstack

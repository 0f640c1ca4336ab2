// The Q4_K_M mix of --quantization q4_k (model/quant_mix.h): llama.cpp's
// use_more_bits layers and the format of each named matrix.
#include "model/quant_mix.h"

#include <gtest/gtest.h>

#include <vector>

namespace specstack {
namespace {

std::vector<int64_t> more_bits_layers(int64_t n_layers) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < n_layers; ++l)
    if (use_more_bits(l, n_layers)) out.push_back(l);
  return out;
}

TEST(QuantMix, UseMoreBitsPicksTheEndsAndEveryThirdLayer) {
  // 16 layers (llama-3.2-1b): eighth 2, last eighth from 14, then 2 + 3k + 2.
  EXPECT_EQ(more_bits_layers(16), (std::vector<int64_t>{0, 1, 4, 7, 10, 13, 14, 15}));
  // 24 layers (qwen2.5-0.5b): eighth 3, last eighth from 21.
  EXPECT_EQ(more_bits_layers(24),
            (std::vector<int64_t>{0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23}));
  // 2 layers (the golden models): no first eighth, the last from 1.
  EXPECT_EQ(more_bits_layers(2), (std::vector<int64_t>{1}));
}

TEST(QuantMix, Q4_KMixByName) {
  const QuantMixContext q4{WeightQuantization::kQ4_K, 16, false};
  EXPECT_EQ(quant_mix_type("lm_head.weight", q4), DType::kQ6_K);
  EXPECT_EQ(quant_mix_type("model.embed_tokens.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.embed_tokens.weight",
                           QuantMixContext{WeightQuantization::kQ4_K, 16, true}),
            DType::kQ6_K);  // tied: the embedding is the output
  EXPECT_EQ(quant_mix_type("model.layers.4.self_attn.v_proj.weight", q4), DType::kQ6_K);
  EXPECT_EQ(quant_mix_type("model.layers.5.self_attn.v_proj.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.layers.13.mlp.down_proj.weight", q4), DType::kQ6_K);
  EXPECT_EQ(quant_mix_type("model.layers.12.mlp.down_proj.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.layers.15.mlp.experts.7.down_proj.weight", q4), DType::kQ6_K);
  EXPECT_EQ(quant_mix_type("model.layers.15.mlp.experts.7.up_proj.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.layers.0.self_attn.k_proj.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.layers.0.self_attn.o_proj.weight", q4), DType::kQ4_K);
  EXPECT_EQ(quant_mix_type("model.layers.0.mlp.gate_proj.weight", q4), DType::kQ4_K);
  const QuantMixContext q8{WeightQuantization::kQ8_0, 16, false};
  EXPECT_EQ(quant_mix_type("lm_head.weight", q8), DType::kQ8_0);
  EXPECT_EQ(quant_mix_type("model.layers.4.self_attn.v_proj.weight", q8), DType::kQ8_0);
}

}  // namespace
}  // namespace specstack

// ModelConfig and weights from GGUF metadata: the committed files give the
// same config as the golden config.json they were made from, and unsupported
// architectures, missing keys and tensor types are one-line errors naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "gguf_builder.h"
#include "model/config.h"
#include "model/gguf_weights.h"
#include "model/weights.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::GgufBuilder;

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/gguf_config_" + name + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

class GgufConfigTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GgufConfigTest, EqualsTheGoldenConfigJson) {
  const auto& [file, golden] = GetParam();
  auto gguf = load_model_config(testing::test_data("gguf/" + file));
  ASSERT_TRUE(gguf.ok()) << gguf.message();
  auto hf = load_model_config(testing::golden_model_dir(golden));
  ASSERT_TRUE(hf.ok()) << hf.message();
  EXPECT_EQ(gguf->arch, hf->arch);
  EXPECT_EQ(gguf->vocab_size, hf->vocab_size);
  EXPECT_EQ(gguf->hidden_size, hf->hidden_size);
  EXPECT_EQ(gguf->n_layers, hf->n_layers);
  EXPECT_EQ(gguf->n_heads, hf->n_heads);
  EXPECT_EQ(gguf->n_kv_heads, hf->n_kv_heads);
  EXPECT_EQ(gguf->head_dim, hf->head_dim);
  if (!hf->moe.n_experts) {
    EXPECT_EQ(gguf->intermediate_size, hf->intermediate_size);
  }
  EXPECT_EQ(gguf->max_position_embeddings, hf->max_position_embeddings);
  EXPECT_NEAR(gguf->rms_norm_eps, hf->rms_norm_eps, 1e-12);  // stored as float32
  EXPECT_EQ(gguf->rope.theta, hf->rope.theta);
  EXPECT_EQ(gguf->tie_word_embeddings, hf->tie_word_embeddings);
  EXPECT_EQ(gguf->attention_bias, hf->attention_bias);
  EXPECT_EQ(gguf->qk_norm, hf->qk_norm);
  EXPECT_EQ(gguf->sliding_window, hf->sliding_window);
  EXPECT_EQ(gguf->moe.n_experts, hf->moe.n_experts);
  EXPECT_EQ(gguf->moe.n_experts_per_token, hf->moe.n_experts_per_token);
  EXPECT_EQ(gguf->moe.expert_intermediate_size, hf->moe.expert_intermediate_size);
  EXPECT_EQ(gguf->moe.norm_topk_prob, hf->moe.norm_topk_prob);
  // llama3 scaling arrives as rope_freqs.weight; the frequencies must agree.
  const Tensor a = compute_rope_inv_freq(*gguf), b = compute_rope_inv_freq(*hf);
  ASSERT_EQ(a.numel(), b.numel());
  for (int64_t j = 0; j < a.numel(); ++j) {
    EXPECT_NEAR(a.f32()[j], b.f32()[j], 2e-7f * b.f32()[j]) << file << " frequency " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Files, GgufConfigTest,
    ::testing::Values(std::pair<std::string, std::string>{"llama3-rope.f32.gguf", "llama3-rope"},
                      std::pair<std::string, std::string>{"qwen3.f32.gguf", "qwen3"},
                      std::pair<std::string, std::string>{"qwen3-moe.f16.gguf", "qwen3-moe"},
                      std::pair<std::string, std::string>{"qwen2.q8_0.gguf", "qwen2"},
                      std::pair<std::string, std::string>{"mistral-swa.q8_0.gguf", "mistral-swa"},
                      std::pair<std::string, std::string>{"tinystories-656k.q8_0.gguf",
                                                          "tinystories-656k"}),
    [](const auto& info) {
      std::string name = info.param.second;
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// A minimal one-layer llama file; `skip` leaves out one key.
GgufBuilder tiny_llama(const std::string& arch, const std::string& skip = "") {
  GgufBuilder b;
  b.str("general.architecture", arch);
  auto u32 = [&](const std::string& key, uint32_t v) {
    if (key != skip) b.u32(key, v);
  };
  u32(arch + ".block_count", 1);
  u32(arch + ".embedding_length", 32);
  u32(arch + ".feed_forward_length", 64);
  u32(arch + ".attention.head_count", 2);
  u32(arch + ".context_length", 128);
  if (skip != arch + ".attention.layer_norm_rms_epsilon") {
    b.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  }
  b.tensor("token_embd.weight", {32, 8}, 0, std::string(32 * 8 * 4, '\0'));
  return b;
}

TEST(GgufConfigErrorsTest, NamesWhatIsUnsupportedOrMissing) {
  auto r = load_model_config(write_temp("gemma", tiny_llama("gemma").build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("unsupported architecture 'gemma'"), std::string::npos) << r.message();
  r = load_model_config(write_temp("nolayers", tiny_llama("llama", "llama.block_count").build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("missing metadata key 'llama.block_count'"), std::string::npos)
      << r.message();
  GgufBuilder yarn = tiny_llama("llama");
  yarn.str("llama.rope.scaling.type", "yarn");
  r = load_model_config(write_temp("yarn", yarn.build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("rope.scaling.type 'yarn' is not supported"), std::string::npos)
      << r.message();
  ASSERT_TRUE(load_model_config(write_temp("ok", tiny_llama("llama").build())).ok());
}

TEST(GgufConfigErrorsTest, UnsupportedTensorTypeNamesTensorAndType) {
  // One llama layer, hidden 256 and one head, attn_q stored as Q2_K (84 bytes
  // per 256 values): the parser accepts it, the loader names it.
  GgufBuilder b;
  b.str("general.architecture", "llama");
  b.u32("llama.block_count", 1).u32("llama.embedding_length", 256);
  b.u32("llama.feed_forward_length", 256).u32("llama.attention.head_count", 1);
  b.u32("llama.context_length", 64).f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  b.tensor("token_embd.weight", {256, 8}, 0, std::string(256 * 8 * 4, '\0'));
  for (const char* norm :
       {"output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"}) {
    b.tensor(norm, {256}, 0, std::string(256 * 4, '\0'));
  }
  b.tensor("blk.0.attn_q.weight", {256, 256}, 10, std::string(256 * 84, '\0'));
  const std::string path = write_temp("q2k", b.build());
  auto config = load_model_config(path);
  ASSERT_TRUE(config.ok()) << config.message();
  auto weights = load_weights(*config, path);
  ASSERT_FALSE(weights.ok());
  EXPECT_NE(weights.message().find("tensor 'blk.0.attn_q.weight' has type Q2_K"), std::string::npos)
      << weights.message();
}

TEST(GgufConfigErrorsTest, TensorNamesMapToLlamaCpp) {
  int64_t expert = -1;
  EXPECT_EQ(gguf_tensor_name("model.layers.0.self_attn.q_proj.weight", &expert),
            "blk.0.attn_q.weight");
  EXPECT_EQ(expert, -1);
  EXPECT_EQ(gguf_tensor_name("model.layers.12.post_attention_layernorm.weight", &expert),
            "blk.12.ffn_norm.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.3.mlp.experts.5.down_proj.weight", &expert),
            "blk.3.ffn_down_exps.weight");
  EXPECT_EQ(expert, 5);
  EXPECT_EQ(gguf_tensor_name("lm_head.weight", &expert), "output.weight");
  EXPECT_EQ(gguf_tensor_name("model.layers.0.self_attn.rotary.weight", &expert), "");
}

}  // namespace
}  // namespace specstack

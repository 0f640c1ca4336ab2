#include "model/config.h"

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "base/mapped_file.h"
#include "fp8_checkpoint_config.h"
#include "test_util.h"

namespace specstack {
namespace {

using nlohmann::json;
using specstack::testing::golden_model_dir;
using specstack::testing::test_data;

ModelConfig load_ok(const std::string& path) {
  Result<ModelConfig> config = load_model_config(path);
  EXPECT_TRUE(config.ok()) << path << ": " << (config.ok() ? "" : config.message());
  return config.ok() ? config.value() : ModelConfig{};
}

json golden_json(const std::string& name) {
  Result<std::string> text = read_text_file(golden_model_dir(name) + "/config.json");
  EXPECT_TRUE(text.ok());
  return json::parse(text.value());
}

TEST(ConfigTest, GoldenLlamaGqa) {
  ModelConfig c = load_ok(golden_model_dir("llama-gqa"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureLlama);
  EXPECT_STREQ(architecture_name(c.arch), "llama");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.intermediate_size, 344);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, RopeType::kRopeDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.moe.n_experts, 0);
  EXPECT_FALSE(c.layer_is_moe(0));
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(c.weight_dtype, DType::kF32);
}

TEST(ConfigTest, GoldenLlama3Rope) {
  ModelConfig c = load_ok(golden_model_dir("llama3-rope") + "/config.json");
  EXPECT_EQ(c.arch, Architecture::kArchitectureLlama);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.rope.type, RopeType::kRopeLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ConfigTest, GoldenQwen2) {
  ModelConfig c = load_ok(golden_model_dir("qwen2"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureQwen2);
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
}

TEST(ConfigTest, GoldenQwen3) {
  ModelConfig c = load_ok(golden_model_dir("qwen3"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureQwen3);
  EXPECT_EQ(c.hidden_size, 96);
  EXPECT_EQ(c.head_dim, 32);  // heads * head_dim = 128 != hidden
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.sliding_window, 0);
}

TEST(ConfigTest, GoldenMistralSwa) {
  ModelConfig c = load_ok(golden_model_dir("mistral-swa"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureMistral);
  EXPECT_EQ(c.sliding_window, 48);
  EXPECT_TRUE(c.layer_is_sliding(1));
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_FALSE(c.attention_bias);
}

TEST(ConfigTest, GoldenQwen3Moe) {
  ModelConfig c = load_ok(golden_model_dir("qwen3-moe"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureQwen3Moe);
  EXPECT_STREQ(architecture_name(c.arch), "qwen3_moe");
  EXPECT_EQ(c.moe.n_experts, 8);
  EXPECT_EQ(c.moe.n_experts_per_token, 2);
  EXPECT_EQ(c.moe.expert_intermediate_size, 64);
  EXPECT_TRUE(c.moe.norm_topk_prob);
  EXPECT_EQ(c.moe.decoder_sparse_step, 1);
  EXPECT_TRUE(c.moe.mlp_only_layers.empty());
  EXPECT_TRUE(c.layer_is_moe(0));
  EXPECT_TRUE(c.layer_is_moe(1));
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
}

TEST(ConfigTest, GoldenTinyStories) {
  ModelConfig c = load_ok(golden_model_dir("tinystories-656k"));
  EXPECT_EQ(c.arch, Architecture::kArchitectureLlama);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.head_dim, 16);  // 128 / 8, no head_dim field
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, RopeType::kRopeDefault);
}

TEST(ConfigTest, SharedLlamaConfigs) {
  ModelConfig big = load_ok(test_data("configs/llama-3.1-8b.json"));
  EXPECT_EQ(big.n_layers, 32);
  EXPECT_EQ(big.n_kv_heads, 8);
  EXPECT_EQ(big.head_dim, 128);
  EXPECT_EQ(big.vocab_size, 128256);
  EXPECT_EQ(big.rope.type, RopeType::kRopeLlama3);
  EXPECT_DOUBLE_EQ(big.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(big.rope.factor, 8.0);
  EXPECT_EQ(big.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(big.weight_dtype, DType::kBF16);
  EXPECT_EQ(big.bos_token_id, 128000);
  EXPECT_EQ(big.eos_token_ids, std::vector<int32_t>{128001});
  EXPECT_FALSE(big.tie_word_embeddings);

  ModelConfig small = load_ok(test_data("configs/llama-3.2-1b.json"));
  EXPECT_EQ(small.head_dim, 64);
  EXPECT_DOUBLE_EQ(small.rope.factor, 32.0);
  EXPECT_TRUE(small.tie_word_embeddings);
}

TEST(ConfigTest, SharedMistralAndQwenConfigs) {
  ModelConfig mistral = load_ok(test_data("configs/mistral-7b-v0.1.json"));
  EXPECT_EQ(mistral.arch, Architecture::kArchitectureMistral);
  EXPECT_EQ(mistral.head_dim, 128);  // 4096 / 32
  EXPECT_EQ(mistral.sliding_window, 4096);

  for (const char* name : {"qwen2.5-0.5b", "qwen2.5-7b", "qwen2.5-32b"}) {
    ModelConfig qwen = load_ok(test_data(std::string("configs/") + name + ".json"));
    EXPECT_EQ(qwen.arch, Architecture::kArchitectureQwen2) << name;
    EXPECT_TRUE(qwen.attention_bias) << name;
    EXPECT_EQ(qwen.head_dim, qwen.hidden_size / qwen.n_heads) << name;
    EXPECT_EQ(qwen.eos_token_ids, std::vector<int32_t>{151643}) << name;
  }
  ModelConfig half = load_ok(test_data("configs/qwen2.5-0.5b.json"));
  EXPECT_EQ(half.head_dim, 64);  // 896 / 14
  EXPECT_EQ(half.n_kv_heads, 2);

  ModelConfig q3 = load_ok(test_data("configs/qwen3-8b.json"));
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_EQ(load_ok(test_data("configs/qwen3-0.6b.json")).head_dim, 128);  // 16*128 != 1024

  ModelConfig moe = load_ok(test_data("configs/qwen3-30b-a3b.json"));
  EXPECT_EQ(moe.arch, Architecture::kArchitectureQwen3Moe);
  EXPECT_EQ(moe.moe.n_experts, 128);
  EXPECT_EQ(moe.moe.n_experts_per_token, 8);
  EXPECT_EQ(moe.moe.expert_intermediate_size, 768);
  EXPECT_EQ(moe.n_layers, 48);
  EXPECT_TRUE(moe.layer_is_moe(47));
  EXPECT_EQ(moe.eos_token_ids, std::vector<int32_t>{151645});
}

Result<ModelConfig> parse_json(const json& j) {
  return parse_model_config(j.dump());
}

ModelConfig parse_ok(const json& j) {
  Result<ModelConfig> config = parse_json(j);
  EXPECT_TRUE(config.ok()) << (config.ok() ? "" : config.message());
  return config.ok() ? config.value() : ModelConfig{};
}

TEST(ConfigTest, Fp8CheckpointsAreReadAndOtherQuantizedOnesRefusedByMethod) {
  // FP8 (model/stored_quantization.h): compressed-tensors float-quantized
  // with per-channel or per-tensor scales, and fbgemm_fp8.
  for (const char* strategy : {"channel", "tensor"}) {
    json j = golden_json("qwen2");
    j["quantization_config"] = testing::fp8_compressed_tensors_config(strategy);
    EXPECT_EQ(parse_ok(j).stored_quantization, "compressed-tensors") << strategy;
  }
  json fbgemm = golden_json("qwen2");
  fbgemm["quantization_config"] = {{"quant_method", "fbgemm_fp8"},
                                   {"activation_scale_ub", 1200.0},
                                   {"modules_to_not_convert", {"lm_head"}}};
  EXPECT_EQ(parse_ok(fbgemm).stored_quantization, "fbgemm_fp8");
  json null_config = golden_json("qwen2");
  null_config["quantization_config"] = nullptr;  // HF writes null for "none"
  EXPECT_EQ(parse_ok(null_config).stored_quantization, "");

  // Other methods: one line naming the method.
  for (const char* method : {"gptq", "awq", "bitsandbytes", "fp8"}) {
    json j = golden_json("qwen2");
    j["quantization_config"] = {{"quant_method", method}, {"weight_block_size", {128, 128}}};
    Result<ModelConfig> config = parse_json(j);
    ASSERT_FALSE(config.ok()) << method;
    EXPECT_NE(config.message().find(std::string("quant_method '") + method + "'"),
              std::string::npos)
        << config.message();
    EXPECT_EQ(config.message().find('\n'), std::string::npos);
  }
  // compressed-tensors that is not per-channel / per-tensor FP8: named why.
  struct Refusal {
    const char* what;
    std::function<void(json&)> edit;
    const char* message;
  };
  const std::vector<Refusal> refusals = {
      {"int4 packed", [](json& q) { q["format"] = "pack-quantized"; }, "format 'pack-quantized'"},
      {"int8 weights", [](json& q) { q["config_groups"]["group_0"]["weights"]["type"] = "int"; },
       "weights of type 'int'"},
      {"4-bit float", [](json& q) { q["config_groups"]["group_0"]["weights"]["num_bits"] = 4; },
       "with 4 bits"},
      {"group scales",
       [](json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "group"; },
       "weight strategy 'group'"},
      {"block scales",
       [](json& q) { q["config_groups"]["group_0"]["weights"]["strategy"] = "block"; },
       "weight strategy 'block'"},
      {"dynamic weights",
       [](json& q) { q["config_groups"]["group_0"]["weights"]["dynamic"] = true; },
       "dynamic weight scales"},
      {"fp8 kv cache",
       [](json& q) {
         q["kv_cache_scheme"] = {{"num_bits", 8}, {"type", "float"}};
       },
       "kv_cache_scheme"},
      {"no groups", [](json& q) { q.erase("config_groups"); }, "without config_groups"},
  };
  for (const Refusal& r : refusals) {
    json j = golden_json("qwen2");
    json q = testing::fp8_compressed_tensors_config("channel");
    r.edit(q);
    j["quantization_config"] = q;
    Result<ModelConfig> config = parse_json(j);
    ASSERT_FALSE(config.ok()) << r.what;
    EXPECT_NE(config.message().find(r.message), std::string::npos) << config.message();
    EXPECT_EQ(config.message().find('\n'), std::string::npos);
  }
}

TEST(ConfigTest, RopeSpellings) {
  json j = golden_json("llama3-rope");
  // transformers 5 spelling only.
  j.erase("rope_scaling");
  j.erase("rope_theta");
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.rope.type, RopeType::kRopeLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 256);

  // Old "type" key inside rope_scaling, no rope_parameters.
  json old = golden_json("llama3-rope");
  old.erase("rope_parameters");
  old["rope_scaling"].erase("rope_type");
  old["rope_scaling"]["type"] = "llama3";
  EXPECT_EQ(parse_ok(old).rope.type, RopeType::kRopeLlama3);

  // No rope fields at all: default theta 10000.
  json bare = golden_json("llama-gqa");
  bare.erase("rope_parameters");
  bare.erase("rope_scaling");
  bare.erase("rope_theta");
  EXPECT_DOUBLE_EQ(parse_ok(bare).rope.theta, 10000.0);
}

TEST(ConfigTest, DefaultsFollowHf) {
  json j = golden_json("llama-gqa");
  j.erase("num_key_value_heads");
  j.erase("head_dim");
  j.erase("dtype");
  j.erase("torch_dtype");
  j.erase("bos_token_id");
  j["eos_token_id"] = json::array({2, 7});
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.weight_dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 7}));

  j["eos_token_id"] = nullptr;
  j["torch_dtype"] = "float16";
  ModelConfig d = parse_ok(j);
  EXPECT_TRUE(d.eos_token_ids.empty());
  EXPECT_EQ(d.weight_dtype, DType::kF16);

  json mistral = golden_json("mistral-swa");
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(parse_ok(mistral).sliding_window, 0);
  mistral.erase("sliding_window");
  EXPECT_EQ(parse_ok(mistral).sliding_window, 4096);  // MistralConfig default

  json qwen3 = golden_json("qwen3");
  qwen3.erase("head_dim");
  EXPECT_EQ(parse_ok(qwen3).head_dim, 128);  // Qwen3Config default

  json llama_bias = golden_json("llama-gqa");
  llama_bias["attention_bias"] = true;
  EXPECT_TRUE(parse_ok(llama_bias).attention_bias);
}

TEST(ConfigTest, MoeLayerSelection) {
  json j = golden_json("qwen3-moe");
  j["num_hidden_layers"] = 6;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = json::array({3});
  j.erase("num_experts");  // num_local_experts alone is enough
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.moe.n_experts, 8);
  std::vector<bool> moe;
  for (int64_t l = 0; l < 6; ++l) moe.push_back(c.layer_is_moe(l));
  EXPECT_EQ(moe, (std::vector<bool>{false, true, false, false, false, true}));

  // Every layer routed: intermediate_size may be absent.
  json all_moe = golden_json("qwen3-moe");
  all_moe.erase("intermediate_size");
  EXPECT_EQ(parse_ok(all_moe).intermediate_size, 0);
}

struct BadCase {
  const char* base;  // golden model whose config is mutated
  std::function<void(json&)> mutate;
  const char* expected;  // substring of the error message
};

TEST(ConfigTest, BadFieldsNameTheField) {
  auto set = [](const char* key, json value) { return [key, value](json& j) { j[key] = value; }; };
  auto drop = [](const char* key) { return [key](json& j) { j.erase(key); }; };
  const BadCase cases[] = {
      {"llama-gqa", set("model_type", "gpt2"), "unsupported model_type 'gpt2' (supported:"},
      {"llama-gqa", drop("model_type"), "model_type"},
      {"llama-gqa", set("model_type", 7), "'model_type' must be a string"},
      {"llama-gqa", drop("vocab_size"), "missing required field 'vocab_size' (an integer)"},
      {"llama-gqa", set("vocab_size", "512"), "'vocab_size' must be an integer, got string"},
      {"llama-gqa", set("vocab_size", int64_t{1} << 40), "'vocab_size'"},
      {"llama-gqa", set("vocab_size", UINT64_MAX), "'vocab_size' is out of range"},
      {"llama-gqa", set("hidden_size", 0), "'hidden_size' must be positive"},
      {"llama-gqa", set("hidden_size", 128.5), "'hidden_size' must be an integer, got number"},
      {"llama-gqa", drop("intermediate_size"), "intermediate_size"},
      {"llama-gqa", set("num_hidden_layers", -1), "num_hidden_layers"},
      {"llama-gqa", drop("num_attention_heads"), "num_attention_heads"},
      {"llama-gqa", set("num_key_value_heads", 3), "num_key_value_heads"},
      {"llama-gqa", set("num_key_value_heads", json::array()), "num_key_value_heads"},
      {"llama-gqa", set("head_dim", 15), "'head_dim' (15) must be even"},
      {"llama-gqa", set("head_dim", "16"), "head_dim"},
      {"tinystories-656k", set("hidden_size", 100), "not divisible by 'num_attention_heads'"},
      {"llama-gqa", set("hidden_act", "gelu"), "'hidden_act' = 'gelu' is not supported"},
      {"llama-gqa", set("hidden_act", 1), "hidden_act"},
      {"llama-gqa", set("mlp_bias", true), "'mlp_bias' = true is not supported"},
      {"llama-gqa", set("rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}}),
       "unsupported rope_scaling type 'yarn'"},
      {"llama-gqa", set("rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}),
       "unsupported rope_scaling type 'linear'"},
      {"llama-gqa", set("rope_parameters", json{{"rope_type", "dynamic"}}),
       "unsupported rope_parameters type 'dynamic'"},
      {"llama-gqa", set("rope_scaling", "llama3"), "rope_scaling"},
      {"llama-gqa", set("rope_theta", "big"), "'rope_theta' must be a number"},
      {"llama-gqa", set("rope_theta", -1.0), "'rope_theta' must be a positive number"},
      {"llama3-rope", [](json& j) { j["rope_scaling"].erase("low_freq_factor"); },
       "missing required field 'low_freq_factor'"},
      {"llama3-rope", [](json& j) { j["rope_scaling"].erase("original_max_position_embeddings"); },
       "original_max_position_embeddings"},
      {"llama3-rope", [](json& j) { j["rope_scaling"]["factor"] = "8"; }, "'factor'"},
      {"llama3-rope", [](json& j) { j["rope_scaling"]["high_freq_factor"] = 1.0; },
       "high_freq_factor"},
      {"llama-gqa", set("rms_norm_eps", "tiny"), "rms_norm_eps"},
      {"llama-gqa", set("max_position_embeddings", 0), "max_position_embeddings"},
      {"llama-gqa", set("tie_word_embeddings", "yes"), "'tie_word_embeddings' must be a boolean"},
      {"llama-gqa", set("attention_bias", 1), "attention_bias"},
      {"llama-gqa", set("bos_token_id", 1.5), "bos_token_id"},
      {"llama-gqa", set("eos_token_id", "2"), "eos_token_id"},
      {"llama-gqa", set("eos_token_id", json::array({1, "x"})), "eos_token_id"},
      {"llama-gqa", set("eos_token_id", -5), "eos_token_id"},
      {"llama-gqa", set("dtype", "float64"), "'dtype' = 'float64' is not supported"},
      {"tinystories-656k", set("torch_dtype", "int8"), "'torch_dtype' = 'int8'"},
      {"qwen2", set("use_sliding_window", true), "use_sliding_window"},
      {"qwen3", set("use_sliding_window", "no"), "use_sliding_window"},
      {"mistral-swa", set("sliding_window", "48"), "sliding_window"},
      {"mistral-swa", set("sliding_window", 0), "'sliding_window' must be positive"},
      {"qwen3-moe",
       [](json& j) {
         j.erase("num_experts");
         j.erase("num_local_experts");
       },
       "num_experts"},
      {"qwen3-moe", set("num_local_experts", 4), "disagree"},
      {"qwen3-moe", set("num_experts_per_tok", 9), "num_experts_per_tok"},
      {"qwen3-moe", drop("num_experts_per_tok"), "num_experts_per_tok"},
      {"qwen3-moe", drop("moe_intermediate_size"), "moe_intermediate_size"},
      {"qwen3-moe", set("norm_topk_prob", "true"), "norm_topk_prob"},
      {"qwen3-moe", set("decoder_sparse_step", 0), "decoder_sparse_step"},
      {"qwen3-moe", set("mlp_only_layers", json::array({2})), "mlp_only_layers"},
      {"qwen3-moe", set("mlp_only_layers", 0), "mlp_only_layers"},
      {"qwen3-moe",
       [](json& j) {
         j["mlp_only_layers"] = json::array({0});
         j.erase("intermediate_size");
       },
       "intermediate_size"},
      {"qwen3-moe",
       [](json& j) {
         j["decoder_sparse_step"] = 2;
         j.erase("intermediate_size");
       },
       "missing required field 'intermediate_size'"},
  };
  for (const BadCase& c : cases) {
    json j = golden_json(c.base);
    c.mutate(j);
    Result<ModelConfig> config = parse_json(j);
    ASSERT_FALSE(config.ok()) << "accepted: " << j.dump();
    EXPECT_NE(config.message().find(c.expected), std::string::npos)
        << "message: " << config.message() << "\nexpected to contain: " << c.expected;
    EXPECT_EQ(config.message().rfind("config.json: ", 0), 0u) << config.message();
  }
}

TEST(ConfigTest, MalformedJsonNeverThrows) {
  Result<ModelConfig> bad = parse_model_config("{\"model_type\": \"llama\",");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("config.json: invalid JSON at byte"), std::string::npos)
      << bad.message();

  const std::string inputs[] = {
      "",
      "[]",
      "null",
      "\"llama\"",
      "{\"model_type\": \"\xff\xfe\"}",
      std::string(5000, '[') + std::string(5000, ']'),
      "{\"model_type\": \"llama\", \"rope_theta\": 1e400}",
      std::string("{\"model_type\"\0: 1}", 19),
  };
  for (const std::string& input : inputs) {
    Result<ModelConfig> config = parse_model_config(input);
    ASSERT_FALSE(config.ok()) << input.substr(0, 40);
    EXPECT_EQ(config.message().rfind("config.json: ", 0), 0u) << config.message();
  }
  EXPECT_NE(parse_model_config("[]").message().find("object"), std::string::npos);
}

TEST(ConfigTest, LoadErrorsNameThePath) {
  Result<ModelConfig> missing = load_model_config(test_data("configs/no-such-model.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("no-such-model.json"), std::string::npos);
}

}  // namespace
}  // namespace specstack

// FP8 checkpoints (model/stored_quantization.h): a golden model written the
// way llm-compressor writes FP8 ("compressed-tensors", float-quantized: e4m3
// matrices with per-channel or per-tensor scales) loads with every linear
// matrix equal to e4m3 x scale rounded once to bf16 and every other tensor as
// stored, and its logits stay near HF transformers' reference of the
// unquantized model.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "engine/model_instance.h"
#include "fp8_checkpoint_config.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::golden_model_dir;

// The e4m3fn value of a code from the format's definition (bias 7,
// subnormals m / 8 2^-6, 0x7f / 0xff NaN), independent of dtype.h's decoder.
double e4m3_value(uint8_t code) {
  const int e = (code >> 3) & 0xf, m = code & 0x7;
  const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

// Nearest e4m3 code, ties to the even code, saturating at +-448 (what
// llm-compressor's per-channel FP8 quantization stores).
uint8_t encode_e4m3(float x) {
  const double a = std::min(std::fabs(static_cast<double>(x)), 448.0);
  uint8_t best = 0;
  double best_err = a;
  for (uint8_t code = 1; code <= 0x7e; ++code) {
    const double err = std::fabs(e4m3_value(code) - a);
    if (err < best_err || (err == best_err && (code & 1) == 0)) {
      best = code;
      best_err = err;
    }
  }
  return std::signbit(x) ? static_cast<uint8_t>(best | 0x80) : best;
}

TEST(E4m3, DecodesEveryCodeAsTheFormatDefines) {
  for (int code = 0; code < 256; ++code) {
    const auto c = static_cast<uint8_t>(code);
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(e4m3_to_f32(c))) << code;
    } else {
      EXPECT_EQ(static_cast<double>(e4m3_to_f32(c)), e4m3_value(c)) << code;
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(encode_e4m3(1.0f), 0x38);
  EXPECT_EQ(encode_e4m3(-1000.0f), 0xfe);
}

bool is_linear(const std::string& name, const Tensor& t) {
  const std::string suffix = "_proj.weight";
  return t.dim() == 2 && name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
      case DType::kF32:
        out[size_t(i)] = t.f32()[i];
        break;
      case DType::kBF16:
        out[size_t(i)] = bf16_to_f32(t.data<uint16_t>()[i]);
        break;
      case DType::kF16:
        out[size_t(i)] = f16_to_f32(t.data<uint16_t>()[i]);
        break;
      default:
        ADD_FAILURE() << "unexpected dtype " << dtype_name(t.dtype());
    }
  }
  return out;
}

// Writes golden model `name` as an FP8 checkpoint in a fresh folder:
// strategy "channel" (one scale per output row, stored [rows, 1]) or
// "tensor" (one per matrix, stored [1]); scale = amax / 448.
class Fp8Checkpoint {
 public:
  Fp8Checkpoint(const std::string& name, const std::string& strategy) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() / ("specstack_fp8ckpt_" + std::to_string(::getpid()) + "_" +
                                         info->name() + "_" + strategy))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    const std::string src = golden_model_dir(name);
    json config = json::parse(testing::read_text(src + "/config.json"));
    config["quantization_config"] = testing::fp8_compressed_tensors_config(strategy);
    std::ofstream(dir_ + "/config.json") << config.dump(2);
    auto files = WeightFiles::open(src);
    SS_CHECK(files.ok());
    std::vector<std::pair<std::string, Tensor>> out;
    for (const std::string& tensor_name : files->names()) {
      Result<Tensor> t = files->get(tensor_name);
      SS_CHECK(t.ok());
      if (!is_linear(tensor_name, *t)) {
        Tensor copy = Tensor::zeros(t->dtype(), t->shape());
        std::memcpy(copy.raw(), t->raw(), t->nbytes());
        out.emplace_back(tensor_name, std::move(copy));
        continue;
      }
      const int64_t rows = t->size(0), cols = t->size(1);
      const std::vector<float> w = as_f32(*t);
      const bool per_row = strategy == "channel";
      Tensor q = Tensor::zeros(DType::kF8E4M3, {rows, cols});
      Tensor scale = Tensor::zeros(
          DType::kF32, per_row ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1});
      for (int64_t r = 0; r < (per_row ? rows : 1); ++r) {
        float amax = 0;
        const int64_t begin = per_row ? r * cols : 0, end = per_row ? (r + 1) * cols : rows * cols;
        for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(w[size_t(i)]));
        const float s = amax > 0 ? amax / 448.0f : 1.0f;
        scale.f32()[r] = s;
        for (int64_t i = begin; i < end; ++i) q.data<uint8_t>()[i] = encode_e4m3(w[size_t(i)] / s);
      }
      out.emplace_back(tensor_name, std::move(q));
      out.emplace_back(tensor_name + "_scale", std::move(scale));
    }
    SS_CHECK(write_safetensors(dir_ + "/model.safetensors", out).ok());
  }
  ~Fp8Checkpoint() { fs::remove_all(dir_); }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Every linear matrix is e4m3 x scale rounded once to bf16 (computed here
// from the written file); every other tensor is what the golden folder holds.
void expect_dequantized(const std::string& name, const std::string& strategy) {
  SCOPED_TRACE(name + " " + strategy);
  Fp8Checkpoint ckpt(name, strategy);
  Result<ModelConfig> config = load_model_config(ckpt.dir());
  ASSERT_TRUE(config.ok()) << config.message();
  EXPECT_EQ(config->stored_quantization, "compressed-tensors");
  Result<ModelWeights> weights = load_weights(*config, ckpt.dir());
  ASSERT_TRUE(weights.ok()) << weights.message();
  EXPECT_NE(weights->load_note.find("FP8 checkpoint (compressed-tensors)"), std::string::npos)
      << weights->load_note;
  auto stored = WeightFiles::open(ckpt.dir());
  ASSERT_TRUE(stored.ok());
  const LayerWeights& layer = weights->layers[0];
  const std::vector<std::pair<std::string, const Tensor*>> checks = {
      {"model.layers.0.self_attn.q_proj.weight", &layer.wq},
      {"model.layers.0.self_attn.v_proj.weight", &layer.wv},
      {"model.layers.0.self_attn.o_proj.weight", &layer.wo},
      {layer.experts.empty() ? "model.layers.0.mlp.down_proj.weight"
                             : "model.layers.0.mlp.experts.0.down_proj.weight",
       layer.experts.empty() ? &layer.w_down : &layer.experts[0].w_down}};
  for (const auto& [tensor_name, loaded] : checks) {
    SCOPED_TRACE(tensor_name);
    Result<Tensor> q = stored->get(tensor_name);
    Result<Tensor> scale = stored->get(tensor_name + "_scale");
    ASSERT_TRUE(q.ok() && scale.ok());
    ASSERT_EQ(q->dtype(), DType::kF8E4M3);
    ASSERT_EQ(loaded->dtype(), DType::kBF16);
    ASSERT_EQ(loaded->shape(), q->shape());
    const int64_t cols = q->size(1);
    int64_t mismatches = 0;
    for (int64_t i = 0; i < q->numel(); ++i) {
      const float s = scale->f32()[scale->numel() == 1 ? 0 : i / cols];
      const float expected = static_cast<float>(e4m3_value(q->data<uint8_t>()[i])) * s;
      mismatches += loaded->data<uint16_t>()[i] != f32_to_bf16(expected);
    }
    EXPECT_EQ(mismatches, 0);
  }
  Result<Tensor> original_norm =
      WeightFiles::open(golden_model_dir(name))->get("model.layers.0.input_layernorm.weight");
  ASSERT_TRUE(original_norm.ok());
  EXPECT_EQ(as_f32(*original_norm), as_f32(layer.attn_norm));
}

TEST(Fp8Checkpoint, LinearMatricesAreE4m3TimesScaleRoundedOnceToBf16) {
  expect_dequantized("qwen2", "channel");      // attention biases, tied embeddings
  expect_dequantized("llama-gqa", "tensor");   // untied head, intermediate 344
  expect_dequantized("qwen3-moe", "channel");  // experts; the router stays as stored
}

TEST(Fp8Checkpoint, MissingOrBlockwiseScalesAreRefusedByName) {
  Fp8Checkpoint ckpt("qwen2", "channel");
  auto files = WeightFiles::open(ckpt.dir());
  ASSERT_TRUE(files.ok());
  const std::string victim = "model.layers.1.mlp.up_proj.weight";
  std::vector<std::pair<std::string, Tensor>> without, blockwise;
  for (const std::string& name : files->names()) {
    Result<Tensor> t = files->get(name);
    ASSERT_TRUE(t.ok());
    Tensor copy = Tensor::zeros(t->dtype(), t->shape());
    std::memcpy(copy.raw(), t->raw(), t->nbytes());
    if (name == victim + "_scale") {
      blockwise.emplace_back(name, Tensor::zeros(DType::kF32, {2, 2}));  // 128 x 128 blocks
      continue;
    }
    Tensor again = Tensor::zeros(t->dtype(), t->shape());
    std::memcpy(again.raw(), t->raw(), t->nbytes());
    without.emplace_back(name, std::move(copy));
    blockwise.emplace_back(name, std::move(again));
  }
  Result<ModelConfig> config = load_model_config(ckpt.dir());
  ASSERT_TRUE(config.ok());
  ASSERT_TRUE(write_safetensors(ckpt.dir() + "/model.safetensors", without).ok());
  Result<ModelWeights> missing = load_weights(*config, ckpt.dir());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("without its scale '" + victim + "_scale'"), std::string::npos)
      << missing.message();
  ASSERT_TRUE(write_safetensors(ckpt.dir() + "/model.safetensors", blockwise).ok());
  Result<ModelWeights> blocks = load_weights(*config, ckpt.dir());
  ASSERT_FALSE(blocks.ok());
  EXPECT_NE(blocks.message().find("not block-wise scales"), std::string::npos) << blocks.message();
}

TEST(Fp8Checkpoint, TensorParallelRanksMatchOneRank) {
  // The ranks slice the dequantized matrices (copies: the source says its
  // tensors are not views of the file) and must add up to one rank's logits.
  Fp8Checkpoint ckpt("qwen2", "channel");
  testing::GoldenReference ref(golden_model_dir("qwen2") + "/reference.safetensors");
  const std::vector<int32_t> ids = ref.ids("p0.input_ids");
  std::vector<int32_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), 0);
  std::vector<std::vector<float>> logits;
  for (int64_t tp : {1, 2}) {
    CpuBackend backend(CpuBackendOptions{2});
    ModelInstanceOptions options;
    options.kv_tokens = 1024;
    options.model_dir = ckpt.dir();
    options.tensor_parallel_size = tp;
    auto instance = ModelInstance::create(options, backend);
    ASSERT_TRUE(instance.ok()) << instance.message();
    logits.push_back(testing::prefill_then_greedy(**instance, ids, positions,
                                                  static_cast<int32_t>(ids.size()), 0, 16)
                         .prefill_logits);
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  const auto vocab = static_cast<int64_t>(logits[0].size() / ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    EXPECT_LE(
        testing::relative_error(logits[1].data() + r * vocab, logits[0].data() + r * vocab, vocab),
        1e-5)
        << "row " << r;
  }
}

struct Fp8GoldenCase {
  std::string model;
  std::string strategy;
  double tolerance;  // per position, ||ours - ref|| / ||ref||
};

class Fp8CheckpointGolden : public ::testing::TestWithParam<Fp8GoldenCase> {};

TEST_P(Fp8CheckpointGolden, LogitsNearTheUnquantizedReferenceAndArgmaxWhereDecisive) {
  const Fp8GoldenCase& c = GetParam();
  Fp8Checkpoint ckpt(c.model, c.strategy);
  CpuBackend backend(CpuBackendOptions{2});
  ModelInstanceOptions options;
  options.kv_tokens = 4096;
  options.model_dir = ckpt.dir();
  auto instance = ModelInstance::create(options, backend);
  ASSERT_TRUE(instance.ok()) << instance.message();
  testing::GoldenReference ref(golden_model_dir(c.model) + "/reference.safetensors");
  const int64_t vocab = (*instance)->config().vocab_size;
  double worst = 0;
  int decisive = 0;
  for (const char* p : {"p0", "p1", "p2"}) {
    SCOPED_TRACE(p);
    const std::vector<int32_t> ids = ref.ids(std::string(p) + ".input_ids");
    const auto n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> positions(ids.size());
    std::iota(positions.begin(), positions.end(), 0);
    testing::GoldenRun run =
        testing::prefill_then_greedy(**instance, ids, positions, static_cast<int32_t>(n), 0, 64);
    const Tensor& logits = ref.get(std::string(p) + ".logits");
    const Tensor& margins = ref.get(std::string(p) + ".argmax_margin");
    const std::vector<int32_t> ref_argmax = ref.ids(std::string(p) + ".argmax");
    const int64_t first_row = n - logits.size(0);
    for (int64_t r = 0; r < logits.size(0); ++r) {
      const float* ours = run.prefill_logits.data() + (first_row + r) * vocab;
      const double err = testing::relative_error(ours, logits.f32() + r * vocab, vocab);
      worst = std::max(worst, err);
      EXPECT_LE(err, c.tolerance) << "row " << first_row + r;
    }
    // Decisive: the reference's top-2 margin exceeds 1 logit. (At 0.5, as the
    // Q8_0 / Q4_K test uses, e4m3 weights flip 1-2 positions of llama-gqa and
    // qwen3-moe: their logits move ~2-4x more than with Q8_0.)
    for (int64_t i = 0; i < n; ++i) {
      if (margins.f32()[i] > 1.0f) {
        ++decisive;
        EXPECT_EQ(testing::argmax(run.prefill_logits.data() + i * vocab, vocab),
                  ref_argmax[size_t(i)])
            << "position " << i;
      }
    }
  }
  std::printf("%s %s: worst relative logit error %.4f, %d decisive positions\n", c.model.c_str(),
              c.strategy.c_str(), worst, decisive);
  EXPECT_GT(decisive, 0);
}

// Tolerances ~1.4x the measured worst row (2026-12-08: qwen2 channel 0.130,
// llama-gqa tensor 0.229 (channel 0.205; its weights merely rounded to bf16:
// 0.013), qwen3-moe channel 0.565). The MoE's bound is loose because routing
// flips: its weights merely rounded to bf16 are already 0.636 from the f32
// reference on some rows.
INSTANTIATE_TEST_SUITE_P(GoldenModels, Fp8CheckpointGolden,
                         ::testing::Values(Fp8GoldenCase{"qwen2", "channel", 0.18},
                                           Fp8GoldenCase{"llama-gqa", "tensor", 0.32},
                                           Fp8GoldenCase{"qwen3-moe", "channel", 0.8}),
                         [](const auto& info) {
                           return testing::test_name_part(info.param.model) + "_" +
                                  info.param.strategy;
                         });

}  // namespace
}  // namespace specstack

// End-to-end tests of the specstack binary: generate on the real TinyStories
// model reproduces the reference text, logits writes the reference logits,
// and every kind of bad input gives one clear error line and exit code 1.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../engine/golden_reference.h"
#include "base/mapped_file.h"
#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;

CommandResult run(const std::string& args) {
  return testing::run_specstack(args);
}

std::string quote(const std::string& s) {
  return "'" + s + "'";
}

// Scratch folders of these tests.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("specstack_cli_") {}
};

// A copy of the TinyStories folder that a test may damage.
fs::path copy_tinystories(const TempDir& dir) {
  fs::path model = dir.path() / "model";
  fs::create_directories(model);
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(testing::golden_model_dir("tinystories-656k") + "/" + f, model / f);
  }
  return model;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// One error line, exit code 1 (not a signal), and the message mentions `needle`.
using testing::expect_clean_error;

TEST(CliGenerate, TinyStoriesGreedyTextEqualsReference) {
  auto reference = nlohmann::json::parse(
      read_text_file(testing::golden_model_dir("tinystories-656k") + "/reference.json").value());
  for (const auto& text : reference["texts"]) {
    SCOPED_TRACE(text["text"].get<std::string>());
    CommandResult r = run("generate --model " + testing::golden_model_dir("tinystories-656k") +
                          " --prompt " + quote(text["text"]) + " -n 32 --threads 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, text["greedy_text"].get<std::string>() + "\n");
    EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
  }
}

TEST(CliGenerate, StopStringEndsTheOutputBeforeIt) {
  CommandResult r = run("generate --model " + testing::golden_model_dir("tinystories-656k") +
                        " --prompt 'Once upon a time' -n 32 --stop ' small house'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ", a little girl named Lily lived in a\n");
  EXPECT_NE(r.err.find("finish: stop"), std::string::npos) << r.err;
}

TEST(CliLogits, WritesReferenceLogitsAndHonoursExplicitPositions) {
  TempDir dir;
  const std::string model = testing::golden_model_dir("llama-gqa");
  testing::GoldenReference ref(model + "/reference.safetensors");
  const std::vector<int32_t> ids = ref.ids("sparse.input_ids");
  const std::vector<int32_t> kept = ref.ids("sparse.kept");
  auto join = [](const std::vector<int32_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  const fs::path out = dir.path() / "logits.safetensors";
  CommandResult r = run("logits --model " + model + " --tokens " + join(ids) + " --positions " +
                        join(kept) + " --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  testing::GoldenReference ours(out.string());
  const Tensor& logits = ours.get("logits");
  const Tensor& expected = ref.get("sparse.logits");
  ASSERT_EQ(logits.shape(), expected.shape());
  for (int64_t row = 0; row < expected.size(0); ++row) {
    EXPECT_LE(testing::relative_error(logits.f32() + row * 512, expected.f32() + row * 512, 512),
              1e-4);
  }
  EXPECT_EQ(ours.ids("positions"), kept);
  EXPECT_EQ(ours.ids("tokens"), ids);
}

TEST(CliErrors, BadFlagsGiveOneClearLine) {
  const std::string model = testing::golden_model_dir("tinystories-656k");
  expect_clean_error(run("generate --model /nonexistent/model --prompt hi"), "/nonexistent/model");
  expect_clean_error(run("generate --model " + model + " --prompt hi --tokens 1,2"),
                     "exactly one of");
  expect_clean_error(run("generate --model " + model + " --tokens 1,x"), "'x'");
  expect_clean_error(run("generate --model " + model + " --tokens 1,99999"), "99999");
  expect_clean_error(run("generate --model " + model + " --prompt hi --top-p 1.5"), "top_p");
  expect_clean_error(run("generate --model " + model + " --prompt hi -n 600"), "context");
  expect_clean_error(run("logits --model " + model + " --tokens 1,2 --positions 0 --out /tmp/x.st"),
                     "--positions");
}

TEST(CliErrors, DamagedModelFoldersGiveOneClearLine) {
  struct Damage {
    std::string name;
    std::function<void(const fs::path&)> apply;
    std::string needle;
  };
  const std::vector<Damage> cases = {
      {"missing safetensors", [](const fs::path& m) { fs::remove(m / "model.safetensors"); },
       "model.safetensors"},
      {"truncated safetensors",
       [](const fs::path& m) {
         fs::resize_file(m / "model.safetensors", fs::file_size(m / "model.safetensors") / 2);
       },
       "model.safetensors"},
      {"header garbage",
       [](const fs::path& m) { write_file(m / "model.safetensors", std::string(64, '\xff')); },
       "model.safetensors"},
      {"shape mismatch",
       [](const fs::path& m) {
         auto config = nlohmann::json::parse(read_text_file((m / "config.json").string()).value());
         config["intermediate_size"] = 100;
         write_file(m / "config.json", config.dump());
       },
       "expected [100, 128]"},
      {"malformed config",
       [](const fs::path& m) { write_file(m / "config.json", "{\"model_type\": \"llama\","); },
       "config.json"},
      {"unknown architecture",
       [](const fs::path& m) {
         auto config = nlohmann::json::parse(read_text_file((m / "config.json").string()).value());
         config["model_type"] = "gpt_neox";
         write_file(m / "config.json", config.dump());
       },
       "gpt_neox"},
      {"unsupported rope",
       [](const fs::path& m) {
         auto config = nlohmann::json::parse(read_text_file((m / "config.json").string()).value());
         config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
         write_file(m / "config.json", config.dump());
       },
       "yarn"},
      {"malformed tokenizer",
       [](const fs::path& m) { write_file(m / "tokenizer.json", "{\"model\": 3"); }, "tokenizer"},
  };
  for (const Damage& damage : cases) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    fs::path model = copy_tinystories(dir);
    damage.apply(model);
    expect_clean_error(
        run("generate --model " + model.string() + " --prompt 'Once upon a time' -n 4"),
        damage.needle);
  }
}

TEST(CliDummyWeights, RunsAPublishedConfigWithoutWeightFiles) {
  // A tiny config keeps this fast under sanitizers; the bench uses the published ones.
  CommandResult r =
      run("generate --dummy-weights --config " + testing::golden_model_dir("qwen3-moe") +
          "/config.json --prompt-length 8 -n 3 --dtype bf16 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("qwen3_moe"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("generation 3 tokens"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace specstack

// check_same_vocabulary: the startup check that a draft reads token ids as
// its target does.
#include "tokenizer/vocab_check.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "test_util.h"

namespace specstack {
namespace {

using testing::read_text;

std::string tokenizer_dir(const std::string& name) {
  return testing::test_data("golden/tokenizers/" + name);
}

Tokenizer load(const std::string& name) {
  auto loaded = Tokenizer::load_dir(tokenizer_dir(name));
  EXPECT_TRUE(loaded.ok()) << loaded.message();
  return std::move(loaded).value();
}

// TinyStories' tokenizer.json edited by `edit`, with its own tokenizer_config.json
// (or `config` when given).
Tokenizer tinystories_with(const std::function<void(nlohmann::json&)>& edit,
                           const std::string& config = "") {
  nlohmann::json json =
      nlohmann::json::parse(read_text(tokenizer_dir("tinystories") + "/tokenizer.json"));
  edit(json);
  auto loaded = Tokenizer::from_json(
      json.dump(),
      config.empty() ? read_text(tokenizer_dir("tinystories") + "/tokenizer_config.json") : config);
  EXPECT_TRUE(loaded.ok()) << loaded.message();
  return std::move(loaded).value();
}

TEST(VocabCheck, SameTokenizerIsOk) {
  const Tokenizer a = load("tinystories");
  const Tokenizer b = load("tinystories");
  EXPECT_TRUE(check_same_vocabulary(a, b).ok());
  const Tokenizer m = load("mistral-v0.1");
  EXPECT_TRUE(check_same_vocabulary(m, m).ok());
}

TEST(VocabCheck, DifferentVocabulariesNameTheFirstDifferingId) {
  const Tokenizer tiny = load("tinystories");
  const Tokenizer mistral = load("mistral-v0.1");
  const Status status = check_same_vocabulary(tiny, mistral);
  ASSERT_FALSE(status.ok());
  // Both have <unk> at id 0; id 1 is the first that differs.
  EXPECT_EQ(status.message(),
            R"(id 1 differs: "<|start_story|>" vs "<s>" (vocab_size 2048 vs 32000))");
  // The order of the arguments is the order of the message.
  const Status reversed = check_same_vocabulary(mistral, tiny);
  ASSERT_FALSE(reversed.ok());
  EXPECT_EQ(reversed.message(),
            R"(id 1 differs: "<s>" vs "<|start_story|>" (vocab_size 32000 vs 2048))");
}

TEST(VocabCheck, OneRenamedTokenIsFoundAndEscaped) {
  const Tokenizer base = load("tinystories");
  const Tokenizer edited = tinystories_with([](nlohmann::json& json) {
    auto& vocab = json["model"]["vocab"];
    // id 6 is "$" (no BPE merge uses it); give it a text that needs escaping.
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (it.value() == 6) {
        vocab.erase(it);
        break;
      }
    }
    vocab["\t"] = 6;
  });
  const Status status = check_same_vocabulary(base, edited);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), R"(id 6 differs: "$" vs "\t")");
}

TEST(VocabCheck, ExtraTokenAtTheEndIsASizeDifference) {
  const Tokenizer base = load("tinystories");
  const Tokenizer longer = tinystories_with([](nlohmann::json& json) {
    json["added_tokens"].push_back({{"id", 2048},
                                    {"content", "<|extra|>"},
                                    {"single_word", false},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false},
                                    {"special", true}});
  });
  ASSERT_EQ(longer.vocab_size(), 2049);
  const Status status = check_same_vocabulary(base, longer);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(),
            R"(vocab_size differs: 2048 vs 2049 (id 2048 is "<|extra|>" in only one of them))");
}

TEST(VocabCheck, DifferentSpecialIdsAreReported) {
  const Tokenizer base = load("tinystories");
  nlohmann::json config =
      nlohmann::json::parse(read_text(tokenizer_dir("tinystories") + "/tokenizer_config.json"));
  config["bos_token"] = "<|end_story|>";
  const Tokenizer other_bos = tinystories_with([](nlohmann::json&) {}, config.dump());
  Status status = check_same_vocabulary(base, other_bos);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "bos token id differs: 1 vs 2");

  config =
      nlohmann::json::parse(read_text(tokenizer_dir("tinystories") + "/tokenizer_config.json"));
  config["eos_token"] = "<unk>";
  const Tokenizer other_eos = tinystories_with([](nlohmann::json&) {}, config.dump());
  status = check_same_vocabulary(base, other_eos);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.message(), "eos token id differs: 2 vs 0");
}

}  // namespace
}  // namespace specstack

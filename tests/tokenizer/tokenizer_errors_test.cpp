// Malformed tokenizer.json / tokenizer_config.json: an Error that names the
// problem, never a crash.
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

// A valid minimal file with `model` spliced in.
std::string with_model(const std::string& model) {
  return R"({"model": )" + model + "}";
}

const char* kGoodModel =
    R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

void expect_error(const std::string& tokenizer_json, const std::string& needle,
                  const std::string& config_json = "") {
  auto tokenizer = Tokenizer::from_json(tokenizer_json, config_json);
  ASSERT_FALSE(tokenizer.ok()) << "loaded: " << tokenizer_json;
  EXPECT_NE(tokenizer.message().find(needle), std::string::npos)
      << "message \"" << tokenizer.message() << "\" lacks \"" << needle << "\"";
}

TEST(TokenizerErrors, GoodMinimalFileLoads) {
  auto tokenizer = Tokenizer::from_json(with_model(kGoodModel), "");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  EXPECT_EQ(tokenizer->encode("aab", false), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(tokenizer->vocab_size(), 3);
  EXPECT_EQ(tokenizer->chat_template(), "");
  EXPECT_FALSE(tokenizer->bos_id().has_value());
}

TEST(TokenizerErrors, NotJson) {
  expect_error("", "not valid JSON");
  expect_error("{\"model\": {", "not valid JSON");
  expect_error("model = BPE", "not valid JSON");
  expect_error("[1, 2]", "JSON object");
}

TEST(TokenizerErrors, MissingOrWrongModel) {
  expect_error("{}", "model: missing");
  expect_error(R"({"model": null})", "model: expected an object");
  expect_error(with_model(R"({"type": "Unigram", "vocab": [["a", 0.0]]})"),
               "\"Unigram\" is not supported");
  expect_error(with_model(R"({"type": "WordPiece", "vocab": {"a": 0}})"),
               "\"WordPiece\" is not supported");
  expect_error(with_model(R"({"type": "BPE", "merges": []})"), "model.vocab: missing");
  expect_error(with_model(R"({"type": "BPE", "vocab": {"a": 0}})"), "model.merges: missing");
  expect_error(with_model(R"({"type": "BPE", "vocab": {"a": -1}, "merges": []})"),
               "model.vocab[\"a\"]");
  expect_error(with_model(R"({"type": "BPE", "vocab": {"a": "zero"}, "merges": []})"),
               "expected an integer token id");
  expect_error(with_model(R"({"type": "BPE", "vocab": {"a": 99999999999}, "merges": []})"),
               "outside");
}

TEST(TokenizerErrors, BadMerges) {
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": ["a c"]})"),
               "model.merges[0]: token \"c\" is not in the vocab");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": ["a b", "b a"]})"),
               "model.merges[1]: merged token \"ba\"");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": ["ab"]})"),
               "model.merges[0]");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": ["a b c"]})"),
               "model.merges[0]");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": [["a"]]})"),
               "model.merges[0]: expected");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": [7]})"),
               "model.merges[0]: expected");
  expect_error(with_model(R"({"type": "BPE", )" + vocab + R"(, "merges": {"a": "b"}})"),
               "model.merges: expected an array");
}

TEST(TokenizerErrors, BadComponents) {
  const std::string model = std::string(R"("model": )") + kGoodModel;
  expect_error(R"({"normalizer": {"type": "Lowercase"}, )" + model + "}",
               "normalizer: unsupported normalizer type \"Lowercase\"");
  expect_error(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend"}]}, )" +
                   model + "}",
               "normalizer.normalizers[0].prepend: missing");
  expect_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
                  "behavior": "Isolated"}, )" +
                   model + "}",
               "pre_tokenizer.pattern: bad regex");
  expect_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"},
                  "behavior": "Sideways"}, )" +
                   model + "}",
               "unknown split behavior \"Sideways\"");
  expect_error(R"({"pre_tokenizer": {"type": "Split", "pattern": "a", "behavior": "Isolated"}, )" +
                   model + "}",
               "pre_tokenizer.pattern: expected {\"String\"");
  expect_error(R"({"decoder": {"type": "CTC"}, )" + model + "}",
               "unsupported decoder type \"CTC\"");
  expect_error(
      R"({"decoder": {"type": "Strip", "content": "ab", "start": 1, "stop": 0}, )" + model + "}",
      "decoder.content: expected one character");
  expect_error(R"({"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken":
                  {"id": "<s>", "type_id": 0}}], "special_tokens": {}}, )" +
                   model + "}",
               "special token \"<s>\" is not in special_tokens");
  expect_error(R"({"post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 7],
                  "sep": ["[SEP]", 1]}, )" +
                   model + "}",
               "post_processor: token id 7 is not in the vocabulary");
  expect_error(R"({"added_tokens": [{"id": 5}], )" + model + "}",
               "added_tokens[0].content: missing");
  expect_error(R"({"added_tokens": {"id": 5}, )" + model + "}", "added_tokens: expected an array");
}

TEST(TokenizerErrors, DeeplyNestedSequencesAreRefused) {
  std::string normalizer = R"({"type": "NFC"})";
  for (int i = 0; i < 40; ++i)
    normalizer = R"({"type": "Sequence", "normalizers": [)" + normalizer + "]}";
  expect_error(R"({"normalizer": )" + normalizer + R"(, "model": )" + kGoodModel + "}",
               "nested too deeply");
}

TEST(TokenizerErrors, BadTokenizerConfig) {
  const std::string json = with_model(kGoodModel);
  expect_error(json, "tokenizer_config.json: not valid JSON", "{oops");
  expect_error(json, "tokenizer_config.json: bos_token", R"({"bos_token": 1})");
  expect_error(json, "tokenizer_config.json: add_bos_token", R"({"add_bos_token": "yes"})");
  expect_error(json, "tokenizer_config.json: chat_template[0]", R"({"chat_template": [1]})");
}

TEST(TokenizerErrors, ConfigForms) {
  auto tokenizer = Tokenizer::from_json(
      R"({"added_tokens": [{"id": 3, "content": "<s>", "special": true}], "model": )" +
          std::string(kGoodModel) + "}",
      R"({"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": null,
          "chat_template": [{"name": "tool_use", "template": "T"},
                            {"name": "default", "template": "D"}]})");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  EXPECT_EQ(tokenizer->bos_token(), "<s>");
  EXPECT_EQ(tokenizer->bos_id(), 3);
  EXPECT_EQ(tokenizer->eos_token(), "");
  EXPECT_FALSE(tokenizer->eos_id().has_value());
  EXPECT_EQ(tokenizer->chat_template(), "D");
  EXPECT_FALSE(tokenizer->add_bos_token().has_value());
  EXPECT_EQ(tokenizer->vocab_size(), 4);
  EXPECT_TRUE(tokenizer->is_special(3));
  EXPECT_FALSE(tokenizer->is_special(2));
  EXPECT_EQ(tokenizer->id_to_token(2), "ab");
  EXPECT_EQ(tokenizer->id_to_token(99), "");
  EXPECT_EQ(tokenizer->token_to_id("<s>"), 3);
  EXPECT_FALSE(tokenizer->token_to_id("zz").has_value());
}

}  // namespace
}  // namespace specstack

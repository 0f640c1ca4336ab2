// The speculative decoding control in request bodies: `speculative_decoding`,
// top level or in extra_body, on both endpoints, lands in
// RequestOptions::specdecode; a wrong type is a 400 naming the field.
#include <gtest/gtest.h>

#include "server/errors.h"
#include "server/openai_request.h"
#include "server_test_util.h"

namespace specstack {
namespace {

class SpecDecodeRequestTest : public ::testing::TestWithParam<ApiEndpoint> {
 protected:
  void SetUp() override {
    tokenizer_ = testing::load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    // TinyStories has no chat template; a minimal one lets chat bodies reach tokenization.
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

  std::optional<bool> parse_ok(const std::string& fields) {
    auto request = parse_openai_request(GetParam(), body(fields), model_);
    EXPECT_TRUE(request.ok()) << body(fields) << ": " << request.message();
    return request.ok() ? request->options.specdecode.enabled : std::nullopt;
  }

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

TEST_P(SpecDecodeRequestTest, AbsentOrNullMeansTheServerDecides) {
  EXPECT_FALSE(parse_ok("").has_value());
  EXPECT_FALSE(parse_ok(R"("speculative_decoding": null)").has_value());
}

TEST_P(SpecDecodeRequestTest, TopLevelTrueAndFalse) {
  EXPECT_EQ(parse_ok(R"("speculative_decoding": true)"), std::optional<bool>(true));
  EXPECT_EQ(parse_ok(R"("speculative_decoding": false)"), std::optional<bool>(false));
}

TEST_P(SpecDecodeRequestTest, ExtraBodyCountsAndWins) {
  EXPECT_EQ(parse_ok(R"("extra_body": {"speculative_decoding": false})"),
            std::optional<bool>(false));
  // extra_body wins over a top-level field of the same name (vLLM's merge).
  EXPECT_EQ(
      parse_ok(R"("speculative_decoding": false, "extra_body": {"speculative_decoding": true})"),
      std::optional<bool>(true));
  // Independent of the speculative prefill controls beside it.
  auto request = parse_openai_request(
      GetParam(), body(R"("specprefill": true, "extra_body": {"speculative_decoding": false})"),
      model_);
  ASSERT_TRUE(request.ok()) << request.message();
  EXPECT_EQ(request->options.specprefill.enabled, std::optional<bool>(true));
  EXPECT_EQ(request->options.specdecode.enabled, std::optional<bool>(false));
}

TEST_P(SpecDecodeRequestTest, WrongTypesNameTheField) {
  EXPECT_EQ(parse_400(R"("speculative_decoding": "yes")"),
            "'speculative_decoding' must be a boolean, got string");
  EXPECT_EQ(parse_400(R"("speculative_decoding": 1)"),
            "'speculative_decoding' must be a boolean, got number");
  EXPECT_EQ(parse_400(R"("extra_body": {"speculative_decoding": [true]})"),
            "'speculative_decoding' must be a boolean, got array");
}

INSTANTIATE_TEST_SUITE_P(BothEndpoints, SpecDecodeRequestTest,
                         ::testing::Values(ApiEndpoint::kApiCompletions,
                                           ApiEndpoint::kApiChatCompletions),
                         [](const ::testing::TestParamInfo<ApiEndpoint>& info) {
                           return info.param == ApiEndpoint::kApiCompletions ? "Completions"
                                                                             : "ChatCompletions";
                         });

}  // namespace
}  // namespace specstack

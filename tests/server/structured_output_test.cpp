// response_format / grammar parsing: the constraint a request asks for, the
// cache that compiles each grammar once, and the 400s (with `param`) for
// every way to get it wrong.
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "server/errors.h"
#include "server/openai_request.h"
#include "server_test_util.h"

namespace specstack {
namespace {

class StructuredOutputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    cache_ = std::make_unique<GrammarCache>(*tokenizer_, 2);
    model_.tokenizer = tokenizer_.get();
    model_.name = "tiny";
    model_.max_context = 64;
    model_.vocab_size = tokenizer_->vocab_size();
    model_.grammars = cache_.get();
  }

  Result<OpenAiRequest> parse(const std::string& body,
                              ApiEndpoint endpoint = ApiEndpoint::kApiCompletions) {
    param_.clear();
    return parse_openai_request(endpoint, body, model_, &param_);
  }

  // A 400 naming `param` whose message contains `needle`.
  void expect_400(const std::string& body, const std::string& param, const std::string& needle) {
    auto result = parse(body);
    ASSERT_FALSE(result.ok()) << body;
    ApiError api = api_error_from(result.error());
    EXPECT_EQ(api.status, 400) << body;
    EXPECT_EQ(param_, param) << body << ": " << result.message();
    api.param = param_;
    EXPECT_NE(result.message().find(needle), std::string::npos)
        << body << "\n  message: " << result.message() << "\n  expected: " << needle;
    EXPECT_NE(error_body(api).find("\"param\":\"" + param + "\""), std::string::npos);
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<GrammarCache> cache_;
  ServedModel model_;
  std::string param_;
};

TEST_F(StructuredOutputTest, TextAndAbsentAreUnconstrained) {
  auto plain = parse(R"({"prompt": "x"})");
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_EQ(plain->options.constraint, nullptr);
  auto text = parse(R"({"prompt": "x", "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(text->options.constraint, nullptr);
}

TEST_F(StructuredOutputTest, JsonSchemaAndJsonObjectAndGrammarCompile) {
  const std::string schema =
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "p",
          "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
          "required": ["a"]}}}})";
  auto first = parse(schema);
  ASSERT_TRUE(first.ok()) << first.message();
  ASSERT_NE(first->options.constraint, nullptr);
  grammar::TokenMatcher m(first->options.constraint);
  EXPECT_TRUE(m.matcher().next_bytes().test('{'));
  EXPECT_EQ(m.matcher().next_bytes().count(), 1u);
  // The same schema again: the cached constraint (and its masks).
  auto second = parse(schema);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->options.constraint, first->options.constraint);

  auto object = parse(R"({"prompt": "x", "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(object.ok()) << object.message();
  EXPECT_NE(object->options.constraint, nullptr);
  auto gbnf = parse(R"({"prompt": "x", "extra_body": {"grammar": "root ::= \"yes\" | \"no\""}})");
  ASSERT_TRUE(gbnf.ok()) << gbnf.message();
  ASSERT_NE(gbnf->options.constraint, nullptr);
  // Capacity 2: the schema was evicted by the last two.
  auto third = parse(schema);
  ASSERT_TRUE(third.ok());
  EXPECT_NE(third->options.constraint, first->options.constraint);
}

// OpenAI's strict flag: true forbids undeclared properties unless the schema
// allows them; false, or absent (OpenAI's default), follows JSON schema and
// allows them unless additionalProperties says otherwise.
TEST_F(StructuredOutputTest, StrictDecidesAdditionalProperties) {
  auto admits_extra = [&](const std::string& strict) {
    auto request = parse(R"({"prompt": "x", "response_format": {"type": "json_schema",
        "json_schema": {"name": "p", )" +
                         strict + R"("schema": {"type": "object",
        "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})");
    EXPECT_TRUE(request.ok()) << request.message();
    if (!request.ok()) return false;
    grammar::GrammarMatcher m(request->options.constraint->grammar());
    return m.accept_bytes(R"({"a": 1, "b": [true]})") && m.can_end();
  };
  EXPECT_FALSE(admits_extra(R"("strict": true, )"));
  EXPECT_TRUE(admits_extra(R"("strict": false, )"));
  EXPECT_TRUE(admits_extra(""));
}

TEST_F(StructuredOutputTest, ErrorsNameTheParam) {
  expect_400(R"({"prompt": "x", "response_format": {"type": "yaml"}})", "response_format",
             "got 'yaml'");
  expect_400(R"({"prompt": "x", "response_format": {}})", "response_format", "'type'");
  expect_400(R"({"prompt": "x", "response_format": "json"})", "response_format",
             "'response_format' must be an object");
  expect_400(R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "response_format",
             "'response_format.json_schema' must be an object");
  expect_400(
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n"}}})",
      "response_format", "'response_format.json_schema.schema'");
  expect_400(
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}})",
      "response_format", "'response_format.json_schema.name' must be a string");
  expect_400(
      R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n",
          "schema": {"type": "object", "properties": {"a": {"type": "number", "minimum": 0.5}}}}}})",
      "response_format", "'minimum' at '#/properties/a': bounds on numbers must be whole numbers");
  expect_400(R"({"prompt": "x", "grammar": "root ::= [a-"})", "grammar", "line 1, column");
  expect_400(R"({"prompt": "x", "grammar": "root ::= undefined-rule"})", "grammar",
             "'undefined-rule' is used");
  expect_400(R"({"prompt": "x", "grammar": ""})", "grammar", "must not be empty");
  expect_400(
      R"({"prompt": "x", "grammar": "root ::= \"a\"", "response_format": {"type": "json_object"}})",
      "grammar", "cannot be combined");
}

}  // namespace
}  // namespace specstack

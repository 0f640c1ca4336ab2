// Chat `tools` / `tool_choice` / `parallel_tool_calls`: the 400s (each
// naming its param), what a valid request turns into (rendered tools, the
// forced-call grammar, the parse format), messages with tool calls and tool
// results going back through the template, and the response shapes
// (message.tool_calls, finish_reason, streamed delta.tool_calls).
#include "server/tool_request.h"

#include <gtest/gtest.h>

#include "fuzz/openai_request_model.h"
#include "grammar/matcher.h"
#include "server/errors.h"
#include "server/openai_response.h"
#include "server/structured_output.h"
#include "test_util.h"

namespace specstack {
namespace {

using Json = nlohmann::ordered_json;

const char* kWeather = R"({"type": "function", "function": {"name": "weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}})";

class ToolRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = fuzzing::make_fuzz_served_model(testing::test_data(""));
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    model_ = std::move(loaded).value();
    // A byte-level tokenizer, so the prompt decodes back to the exact text.
    auto bytes = Tokenizer::load_dir(testing::test_data("grammar/json-bytes-512"));
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    model_->tokenizer = std::make_unique<Tokenizer>(std::move(bytes).value());
    model_->served.tokenizer = model_->tokenizer.get();
    model_->served.vocab_size = model_->tokenizer->vocab_size();
    cache_ = std::make_unique<GrammarCache>(*model_->tokenizer);
    model_->served.grammars = cache_.get();
  }

  Result<OpenAiRequest> parse(const std::string& extra) {
    param_.clear();
    const std::string body =
        R"({"messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 8)" +
        extra + "}";
    return parse_openai_request(ApiEndpoint::kApiChatCompletions, body, model_->served, &param_);
  }

  std::string prompt_text(const OpenAiRequest& request) {
    return model_->tokenizer->decode(request.options.prompt, false);
  }

  void expect_400(const std::string& extra, const std::string& param, const std::string& needle) {
    auto result = parse(extra);
    ASSERT_FALSE(result.ok()) << extra;
    EXPECT_EQ(api_error_from(result.error()).status, 400) << extra;
    EXPECT_EQ(param_, param) << extra << ": " << result.message();
    EXPECT_NE(result.message().find(needle), std::string::npos)
        << extra << "\n  message: " << result.message() << "\n  expected: " << needle;
  }

  std::unique_ptr<fuzzing::FuzzServedModel> model_;
  std::unique_ptr<GrammarCache> cache_;
  std::string param_;
};

TEST_F(ToolRequestTest, ErrorsNameTheParam) {
  const std::string tools = std::string(R"(, "tools": [)") + kWeather + "]";
  expect_400(R"(, "tools": {"a": 1})", "tools", "'tools' must be an array");
  expect_400(R"(, "tools": [{"type": "retrieval"}])", "tools", "'tools[0].type'");
  expect_400(R"(, "tools": [{"type": "function"}])", "tools", "'tools[0].function' is required");
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": "a b"}}])", "tools",
             "'tools[0].function.name'");
  expect_400(std::string(R"(, "tools": [)") + kWeather + "," + kWeather + "]", "tools",
             "'weather' is declared twice");
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters":
             {"type": "object", "properties": {"a": {"type": "string", "format": "email"}}}}}])",
             "tools", "Invalid 'tools[0].function.parameters': JSON schema keyword 'format'");
  expect_400(R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters":
             {"oneOf": [{"type": "integer"}, {"type": "number"}]}}}])",
             "tools", "parameters': JSON schema 'oneOf' at '#': branches 0 and 1 may both match");
  expect_400(tools + R"(, "tool_choice": "sometimes")", "tool_choice", "got 'sometimes'");
  expect_400(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "nope"}})",
             "tool_choice", "'nope', which is not in 'tools'");
  expect_400(tools + R"(, "tool_choice": {"type": "function"})", "tool_choice", "as an object");
  expect_400(R"(, "tool_choice": "required")", "tool_choice", "only allowed when 'tools'");
  expect_400(tools + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls",
             "parallel_tool_calls");
  expect_400(tools + R"(, "tool_choice": "required", "response_format": {"type": "json_object"})",
             "tool_choice", "cannot be combined");
  expect_400(R"(, "messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c",
             "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}])",
             "", "'messages[0].tool_calls[0].function.arguments' must be a JSON object");
}

TEST_F(ToolRequestTest, TemplatesWithoutToolsAreA400) {
  // The TinyStories-style template prints messages only: tools would vanish.
  auto plain = ChatTemplate::parse(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:");
  ASSERT_TRUE(plain.ok());
  ServedModel served = model_->served;
  served.chat_template = &*plain;
  const std::string body = std::string(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [)") + kWeather +
                           "]}";
  std::string param;
  auto ignored = parse_openai_request(ApiEndpoint::kApiChatCompletions, body, served, &param);
  ASSERT_FALSE(ignored.ok());
  EXPECT_EQ(param, "tools");
  EXPECT_NE(ignored.message().find("does not render tools"), std::string::npos);
  // A template that renders tools but teaches a format we cannot parse.
  served = model_->served;
  served.tool_format.reset();
  served.tool_format_error = detect_tool_call_format("{{ tools }}").message();
  param.clear();
  auto unknown = parse_openai_request(ApiEndpoint::kApiChatCompletions, body, served, &param);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(param, "tools");
  EXPECT_NE(unknown.message().find("tool-call format is not one specstack can parse"),
            std::string::npos);
  // Without tools (or with tool_choice none) the same templates serve the request.
  served.chat_template = &*plain;
  EXPECT_TRUE(parse_openai_request(ApiEndpoint::kApiChatCompletions,
                                   R"({"messages": [{"role": "user", "content": "x"}]})", served)
                  .ok());
}

TEST_F(ToolRequestTest, ChoicesDecideRenderingParsingAndConstraint) {
  const std::string tools = std::string(R"(, "tools": [)") + kWeather + "]";
  auto auto_choice = parse(tools);
  ASSERT_TRUE(auto_choice.ok()) << auto_choice.message();
  EXPECT_EQ(auto_choice->tool_calls, ToolCallFormat::kToolCallHermes);
  EXPECT_NE(prompt_text(*auto_choice).find("<tools>"), std::string::npos);
  // auto: constrained lazily, from "<tool_call>" on, one call per trigger,
  // re-armed for parallel calls.
  ASSERT_NE(auto_choice->options.constraint, nullptr);
  ASSERT_TRUE(auto_choice->options.constraint_trigger.has_value());
  EXPECT_EQ(auto_choice->options.constraint_trigger->text, "<tool_call>");
  EXPECT_FALSE(auto_choice->options.constraint_trigger->at_start);
  EXPECT_TRUE(auto_choice->options.constraint_trigger->repeat);
  {
    grammar::GrammarMatcher lazy(auto_choice->options.constraint->grammar());
    ASSERT_TRUE(lazy.accept_bytes(
        "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"P\"}}\n</tool_call>"));
    EXPECT_TRUE(lazy.must_end());  // one call: the trigger starts the next
  }
  auto single = parse(tools + R"(, "parallel_tool_calls": false)");
  ASSERT_TRUE(single.ok()) << single.message();
  EXPECT_FALSE(single->options.constraint_trigger->repeat);  // ends after the call

  auto none = parse(tools + R"(, "tool_choice": "none")");
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_FALSE(none->tool_calls.has_value());
  EXPECT_EQ(prompt_text(*none).find("<tools>"), std::string::npos);  // not offered

  auto required = parse(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  ASSERT_TRUE(required.ok()) << required.message();
  ASSERT_NE(required->options.constraint, nullptr);
  EXPECT_FALSE(required->options.constraint_trigger.has_value());  // from the first token
  grammar::GrammarMatcher m(required->options.constraint->grammar());
  const std::string call =
      "<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"P\"}}\n</tool_call>";
  ASSERT_TRUE(m.accept_bytes(call));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.next_bytes().none());  // not parallel: one call and done

  auto parallel =
      parse(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "weather"}})");
  ASSERT_TRUE(parallel.ok()) << parallel.message();
  grammar::GrammarMatcher p(parallel->options.constraint->grammar());
  ASSERT_TRUE(p.accept_bytes(call));
  EXPECT_TRUE(p.next_bytes().test('\n'));  // another call may follow
  EXPECT_FALSE(p.accept_bytes("\n<tool_call>\n{\"name\": \"other\""));
}

TEST_F(ToolRequestTest, ToolCallsAndToolResultsGoBackThroughTheTemplate) {
  auto round_trip = parse(std::string(R"(, "tools": [)") + kWeather + R"(],
      "messages": [{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
          "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}])");
  ASSERT_TRUE(round_trip.ok()) << round_trip.message();
  const std::string text = prompt_text(*round_trip);
  // The JSON-string arguments became an object the template printed with tojson.
  EXPECT_NE(text.find("{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\"}}"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("<tool_response>\nsunny, 21 C\n</tool_response>"), std::string::npos) << text;
  expect_400(R"(, "messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}])", "",
             "'messages[0].tool_call_id' must be a string");
}

TEST(ToolCallResponse, MessageAndStreamShapes) {
  ResponseHeader header{ApiEndpoint::kApiChatCompletions, "chatcmpl-1", 1, "m"};
  ChoiceOutput choice;
  choice.text = "\n";
  choice.finish = FinishReason::kFinishStop;
  choice.tool_calls = {
      ToolCall{"call_a", "weather", R"({"city":"Paris, a rather long name of a city"})"}};
  const Json body = Json::parse(json_text(completion_response(header, {choice}, {}, false)));
  const Json& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(message["tool_calls"][0]["id"], "call_a");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], choice.tool_calls[0].arguments);
  choice.text = "Checking. ";
  choice.finish = FinishReason::kFinishLength;  // cut: OpenAI's "length" stays
  const Json cut = Json::parse(json_text(completion_response(header, {choice}, {}, false)));
  EXPECT_EQ(cut["choices"][0]["message"]["content"], "Checking.");
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");

  // Streamed: the opening delta names the call, fragments carry arguments.
  ToolCallDelta open_delta;
  open_delta.opening = true;
  open_delta.id = "call_a";
  open_delta.name = "weather";
  const Json first = Json::parse(json_text(tool_call_delta_chunk(header, 0, open_delta, false)));
  const Json& opening = first["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(opening["index"], 0);
  EXPECT_EQ(opening["id"], "call_a");
  EXPECT_EQ(opening["type"], "function");
  EXPECT_EQ(opening["function"]["name"], "weather");
  EXPECT_EQ(opening["function"]["arguments"], "");
  ToolCallDelta fragment;
  fragment.index = 1;
  fragment.arguments = "{\"ci";
  const Json piece = Json::parse(json_text(tool_call_delta_chunk(header, 0, fragment, true)));
  EXPECT_TRUE(piece["usage"].is_null());
  const Json& call = piece["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(call["index"], 1);
  EXPECT_FALSE(call.contains("id"));
  EXPECT_EQ(call["function"]["arguments"], "{\"ci");
}

}  // namespace
}  // namespace specstack

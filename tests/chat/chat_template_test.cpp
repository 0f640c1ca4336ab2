// Real chat templates rendered byte-exact: Llama-3 against the transformers
// golden renderings in tests/data, Qwen3 (from its tokenizer_config.json) and
// the classic Qwen2.5 ChatML template against expectations traced by hand
// through the template (and cross-checked with Python jinja2 3.1.6).
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "test_util.h"

namespace specstack {
namespace {

using nlohmann::ordered_json;

ordered_json load_json(const std::string& relative) {
  std::ifstream in(testing::test_data(relative));
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ordered_json::parse(buffer.str());
}

std::string render_ok(const std::string& source, const ordered_json& context) {
  auto tmpl = ChatTemplate::parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.message();
  if (!tmpl.ok()) return "<parse error>";
  auto out = tmpl->render(context);
  EXPECT_TRUE(out.ok()) << out.message();
  return out.ok() ? *out : "<render error>";
}

TEST(Llama3Template, GoldenConversationsMatchTransformers) {
  const ordered_json chat = load_json("golden/tokenizers/llama3/chat.json");
  const ordered_json config = load_json("golden/tokenizers/llama3/tokenizer_config.json");
  // The golden file was rendered from the tokenizer_config.json template.
  ASSERT_EQ(chat["chat_template"], config["chat_template"]);
  auto tmpl = ChatTemplate::parse(config["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  ASSERT_EQ(chat["conversations"].size(), 3u);
  for (const auto& conversation : chat["conversations"]) {
    ordered_json context = {{"messages", conversation["messages"]},
                            {"add_generation_prompt", conversation["add_generation_prompt"]},
                            {"bos_token", config["bos_token"]},
                            {"eos_token", config["eos_token"]}};
    auto out = tmpl->render(context);
    ASSERT_TRUE(out.ok()) << out.message();
    EXPECT_EQ(*out, conversation["rendered"].get<std::string>());
  }
}

class Qwen3Template : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = load_json("golden/tokenizers/qwen3/tokenizer_config.json")["chat_template"];
  }
  std::string render(const ordered_json& context) const { return render_ok(source_, context); }
  std::string source_;
};

TEST_F(Qwen3Template, SystemAndUser) {
  const ordered_json context = {{"messages",
                                 {{{"role", "system"}, {"content", "You are a helpful assistant."}},
                                  {{"role", "user"}, {"content", "Hello!"}}}},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render(context),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello!<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, UserOnlyWithAndWithoutGenerationPrompt) {
  const ordered_json messages = {{{"role", "user"}, {"content", "Hi there"}}};
  EXPECT_EQ(render({{"messages", messages}, {"add_generation_prompt", true}}),
            "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render({{"messages", messages}, {"add_generation_prompt", false}}),
            "<|im_start|>user\nHi there<|im_end|>\n");
  // No add_generation_prompt at all is undefined, i.e. false.
  EXPECT_EQ(render({{"messages", messages}}), "<|im_start|>user\nHi there<|im_end|>\n");
}

TEST_F(Qwen3Template, EnableThinkingFalseAddsEmptyThinkBlock) {
  const ordered_json messages = {{{"role", "user"}, {"content", "Hi there"}}};
  EXPECT_EQ(
      render({{"messages", messages}, {"add_generation_prompt", true}, {"enable_thinking", false}}),
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_EQ(
      render({{"messages", messages}, {"add_generation_prompt", true}, {"enable_thinking", true}}),
      "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, MultiTurn) {
  const ordered_json context = {{"messages",
                                 {{{"role", "user"}, {"content", "What is 2+2?"}},
                                  {{"role", "assistant"}, {"content", "4"}},
                                  {{"role", "user"}, {"content", "And 3+3?"}}}},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render(context),
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, ReasoningContentShownOnlyAfterLastQuery) {
  const ordered_json context = {
      {"messages",
       {{{"role", "user"}, {"content", "Q1"}},
        {{"role", "assistant"}, {"content", "A1"}, {"reasoning_content", "thought 1"}},
        {{"role", "user"}, {"content", "Q2"}},
        {{"role", "assistant"}, {"content", "A2"}, {"reasoning_content", "\nthought 2\n"}}}},
      {"add_generation_prompt", false}};
  EXPECT_EQ(render(context),
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nthought 2\n</think>\n\nA2<|im_end|>\n");
}

TEST_F(Qwen3Template, InlineThinkIsStrippedFromHistory) {
  const ordered_json context = {
      {"messages",
       {{{"role", "user"}, {"content", "Q1"}},
        {{"role", "assistant"}, {"content", "<think>\nreasoning here\n</think>\n\nA1"}},
        {{"role", "user"}, {"content", "Q2"}}}},
      {"add_generation_prompt", true}};
  EXPECT_EQ(render(context),
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n");
}

const char* const kToolsPreamble =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const char* const kToolsPostamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

ordered_json weather_tools() {
  return ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Get the current weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                     "required": ["city"]}}}])");
}

// tojson keeps the tool's key order (Python dicts are ordered) and uses
// json.dumps' default ", " / ": " separators.
const char* const kWeatherToolJson =
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the "
    "current weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": "
    "{\"type\": \"string\"}}, \"required\": [\"city\"]}}}";

TEST_F(Qwen3Template, ToolsInSystemPrompt) {
  const ordered_json context = {{"messages",
                                 {{{"role", "system"}, {"content", "You are helpful."}},
                                  {{"role", "user"}, {"content", "Weather in Paris?"}}}},
                                {"tools", weather_tools()},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render(context), std::string("<|im_start|>system\nYou are helpful.\n\n") +
                                 kToolsPreamble + "\n" + kWeatherToolJson + kToolsPostamble +
                                 "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                                 "<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, ToolCallAndToolResponse) {
  const ordered_json context = {{"messages", ordered_json::parse(R"([
          {"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
              "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": "{\"temperature\": 21}"}])")},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render(context),
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temperature\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST_F(Qwen3Template, EmptyMessagesIsAnErrorNotACrash) {
  // messages[0].role on an empty list: jinja2 raises UndefinedError too.
  auto tmpl = ChatTemplate::parse(source_);
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render({{"messages", ordered_json::array()}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.message().find("has no element 0"), std::string::npos) << out.message();
}

// The classic Qwen2.5 ChatML template (default system prompt, tools, tool calls).
const char* const kQwen25Template = R"JINJA({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)JINJA";

const char* const kQwenDefaultSystem =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\n";

TEST(Qwen25Template, UserOnlyGetsDefaultSystemPrompt) {
  const ordered_json context = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render_ok(kQwen25Template, context), std::string(kQwenDefaultSystem) +
                                                     "<|im_start|>user\nHi<|im_end|>\n"
                                                     "<|im_start|>assistant\n");
}

TEST(Qwen25Template, ExplicitSystemReplacesDefault) {
  const ordered_json context = {{"messages",
                                 {{{"role", "system"}, {"content", "You are a pirate."}},
                                  {{"role", "user"}, {"content", "Hi"}}}},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render_ok(kQwen25Template, context),
            "<|im_start|>system\nYou are a pirate.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Qwen25Template, MultiTurnWithoutGenerationPrompt) {
  const ordered_json context = {{"messages",
                                 {{{"role", "user"}, {"content", "Hi"}},
                                  {{"role", "assistant"}, {"content", "Hello! How can I help?"}},
                                  {{"role", "user"}, {"content", "Tell me a joke."}}}},
                                {"add_generation_prompt", false}};
  EXPECT_EQ(render_ok(kQwen25Template, context),
            std::string(kQwenDefaultSystem) +
                "<|im_start|>user\nHi<|im_end|>\n"
                "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
                "<|im_start|>user\nTell me a joke.<|im_end|>\n");
}

TEST(Qwen25Template, ToolsAndToolCalls) {
  const ordered_json context = {{"messages", ordered_json::parse(R"([
          {"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "Let me check.", "tool_calls": [
              {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
          {"role": "tool", "content": "21C"},
          {"role": "tool", "content": "sunny"}])")},
                                {"tools", weather_tools()},
                                {"add_generation_prompt", true}};
  EXPECT_EQ(render_ok(kQwen25Template, context),
            std::string("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                        "helpful assistant.\n\n") +
                kToolsPreamble + "\n" + kWeatherToolJson + kToolsPostamble +
                "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
                "<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", "
                "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n21C\n</tool_response>\n<tool_response>\nsunny\n"
                "</tool_response><|im_end|>\n"
                "<|im_start|>assistant\n");
}

TEST(Qwen25Template, NonAsciiContentPassesThrough) {
  const ordered_json context = {{"messages", {{{"role", "user"}, {"content", "Привет, 世界 😀"}}}},
                                {"add_generation_prompt", false}};
  EXPECT_EQ(render_ok(kQwen25Template, context),
            std::string(kQwenDefaultSystem) + "<|im_start|>user\nПривет, 世界 😀<|im_end|>\n");
}

TEST(ChatTemplateApi, ContextMustBeAnObject) {
  auto tmpl = ChatTemplate::parse("x");
  ASSERT_TRUE(tmpl.ok());
  EXPECT_FALSE(tmpl->render(ordered_json::array()).ok());
}

TEST(ChatTemplateApi, PlainJsonContextConverts) {
  // nlohmann::json (sorted keys) is accepted through the implicit conversion.
  auto tmpl = ChatTemplate::parse("{{ messages[0].content }}|{{ d | tojson }}");
  ASSERT_TRUE(tmpl.ok());
  const nlohmann::json context = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                  {"d", {{"b", 1}, {"a", 2}}}};
  auto out = tmpl->render(context);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, "hi|{\"a\": 2, \"b\": 1}");
}

}  // namespace
}  // namespace specstack

// Tool-call formats: detection from the template text, and parsing of
// whole and streamed outputs — complete calls, text before them, several
// calls, calls split across arbitrary chunk boundaries, and malformed output
// that must come back as content (never an error, never a crash).
#include "server/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/tool_call_stream.h"
#include "test_util.h"

namespace specstack {
namespace {

using Json = nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(ToolCallFormat, DetectedFromTheTemplate) {
  const Json qwen =
      Json::parse(read_file(testing::test_data("golden/tokenizers/qwen3/tokenizer_config.json")));
  auto hermes = detect_tool_call_format(qwen["chat_template"].get<std::string>());
  ASSERT_TRUE(hermes.ok());
  EXPECT_EQ(*hermes, ToolCallFormat::kToolCallHermes);
  auto llama =
      detect_tool_call_format(read_file(testing::test_data("tools/llama3.1-json-tools.jinja")));
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(*llama, ToolCallFormat::kToolCallLlamaJson);
  auto none = detect_tool_call_format("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("not one specstack can parse"), std::string::npos);
  EXPECT_EQ(none.message().find('\n'), std::string::npos);  // one line
}

TEST(ToolCallParse, HermesCallsAndContent) {
  auto one =
      parse_tool_calls(ToolCallFormat::kToolCallHermes,
                       "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>");
  EXPECT_FALSE(one.content.has_value());
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].name, "f");
  EXPECT_EQ(one.calls[0].arguments, R"({"x":1})");
  EXPECT_EQ(one.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(one.calls[0].id.size(), 5u + 24u);

  auto two = parse_tool_calls(
      ToolCallFormat::kToolCallHermes,
      "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"k\\\": [true]}\"}\n</tool_call>");
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.content, "Let me look.");
  EXPECT_EQ(two.calls[1].arguments, R"({"k":[true]})");  // a string holding JSON is accepted
  EXPECT_NE(two.calls[0].id, two.calls[1].id);

  // The closing tag cut off (max_tokens, a stop string): the whole JSON still counts.
  auto unclosed = parse_tool_calls(ToolCallFormat::kToolCallHermes,
                                   "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}");
  EXPECT_EQ(unclosed.calls.size(), 1u);

  auto plain = parse_tool_calls(ToolCallFormat::kToolCallHermes, "just text");
  EXPECT_TRUE(plain.calls.empty());
  EXPECT_EQ(plain.content, "just text");
}

TEST(ToolCallParse, MalformedOutputIsContent) {
  for (const char* text : {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1",  // cut
                           "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",    // no arguments
                           "<tool_call>\n{\"arguments\": {}}\n</tool_call>",  // no name
                           "<tool_call>\n[1, 2]\n</tool_call>",
                           "<tool_call>\n{\"name\": \"f\", \"arguments\": 3}\n</tool_call>",
                           "<tool_call>\n{\"name\": \"\", \"arguments\": {}}\n</tool_call>",
                           "<tool_call><tool_call></tool_call>", "<tool_call>"}) {
    auto parsed = parse_tool_calls(ToolCallFormat::kToolCallHermes, text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
  // One good call and one bad one: all of it is content, not half the calls.
  const std::string mixed =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": "
      "{}}\n</tool_call>\n<tool_call>\n{oops\n</tool_call>";
  EXPECT_TRUE(parse_tool_calls(ToolCallFormat::kToolCallHermes, mixed).calls.empty());
}

TEST(ToolCallParse, LlamaJson) {
  auto call = parse_tool_calls(ToolCallFormat::kToolCallLlamaJson,
                               " {\"name\": \"get\", \"parameters\": {\"q\": \"x\"}}\n");
  ASSERT_EQ(call.calls.size(), 1u);
  EXPECT_FALSE(call.content.has_value());
  EXPECT_EQ(call.calls[0].name, "get");
  EXPECT_EQ(call.calls[0].arguments, R"({"q":"x"})");
  auto tagged = parse_tool_calls(ToolCallFormat::kToolCallLlamaJson,
                                 "<|python_tag|>{\"name\": \"g\", \"arguments\": {}}");
  EXPECT_EQ(tagged.calls.size(), 1u);
  for (const char* text : {"Hello {\"name\": \"g\", \"parameters\": {}}", "{\"name\": \"g\"",
                           "{\"name\": \"g\", \"parameters\": []}", "{} trailing"}) {
    auto parsed = parse_tool_calls(ToolCallFormat::kToolCallLlamaJson, text);
    EXPECT_TRUE(parsed.calls.empty()) << text;
    EXPECT_EQ(parsed.content, text);
  }
}

// Feeds `text` in chunks of `step` bytes: the streamed content, the calls
// reassembled from the streamed deltas, the stream's final calls, and how
// many argument fragments arrived before finish().
struct Streamed {
  std::string content;
  std::vector<ToolCall> reassembled;
  std::vector<ToolCall> calls;
  size_t fragments_before_end = 0;
};

Streamed stream_in(ToolCallFormat format, const std::string& text, size_t step) {
  ToolCallStream stream(format);
  Streamed s;
  auto take = [&](const ToolStreamOutput& out, bool at_end) {
    s.content += out.content;
    for (const ToolCallDelta& d : out.calls) {
      if (d.opening) {
        EXPECT_EQ(d.index, s.reassembled.size());
        EXPECT_TRUE(d.arguments.empty());
        s.reassembled.push_back(ToolCall{d.id, d.name, ""});
        continue;
      }
      EXPECT_LT(d.index, s.reassembled.size());
      if (d.index >= s.reassembled.size()) continue;
      // Every fragment is whole UTF-8 (it travels as a JSON string).
      EXPECT_NO_THROW((void)OrderedJson(d.arguments).dump());
      s.reassembled[d.index].arguments += d.arguments;
      if (!at_end) ++s.fragments_before_end;
    }
  };
  for (size_t at = 0; at < text.size(); at += step) take(stream.push(text.substr(at, step)), false);
  take(stream.finish(), true);
  s.calls = stream.calls();
  return s;
}

void expect_same_calls(const std::vector<ToolCall>& a, const std::vector<ToolCall>& b,
                       size_t step) {
  ASSERT_EQ(a.size(), b.size()) << step;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << step;
    EXPECT_EQ(a[i].name, b[i].name) << step;
    EXPECT_EQ(a[i].arguments, b[i].arguments) << step;
  }
}

TEST(ToolCallStream, ContentFlowsAndArgumentsStreamWhateverTheChunking) {
  const std::string text =
      "Sure <b>. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"<tool_call>\"}}\n"
      "</tool_call>";
  for (size_t step = 1; step <= text.size(); ++step) {
    Streamed s = stream_in(ToolCallFormat::kToolCallHermes, text, step);
    EXPECT_EQ(s.content, "Sure <b>. ") << step;
    ASSERT_EQ(s.calls.size(), 1u) << step;
    EXPECT_EQ(s.calls[0].name, "f");
    EXPECT_EQ(s.calls[0].arguments, R"({"a":"<tool_call>"})");
    expect_same_calls(s.reassembled, s.calls, step);
  }
  // A prefix of the marker is held only while it may still become one.
  ToolCallStream stream(ToolCallFormat::kToolCallHermes);
  EXPECT_EQ(stream.push("a <tool_").content, "a ");
  EXPECT_EQ(stream.push("box>").content, "<tool_box>");
  // Streamed malformed calls come back as content at the end.
  Streamed bad = stream_in(ToolCallFormat::kToolCallHermes, "hi <tool_call>\n{\"name\": 1}", 3);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_TRUE(bad.reassembled.empty());
  EXPECT_EQ(bad.content, "hi <tool_call>\n{\"name\": 1}");
}

TEST(ToolCallStream, ParallelCallsStreamTokenByToken) {
  // Pretty-printed arguments with multi-byte characters: fragments go out
  // compact, never split a character, and arrive before the choice ends.
  const std::string text =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"s\": \"caf\xc3\xa9 \\\" }\", "
      "\"n\": [1, 2, {\"k\": null}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
      "\"arguments\": {}}\n</tool_call>";
  for (size_t step = 1; step <= 7; ++step) {
    Streamed s = stream_in(ToolCallFormat::kToolCallHermes, text, step);
    EXPECT_EQ(s.content, "") << step;
    ASSERT_EQ(s.calls.size(), 2u) << step;
    EXPECT_EQ(s.calls[0].arguments, "{\"s\":\"caf\xc3\xa9 \\\" }\",\"n\":[1,2,{\"k\":null}]}");
    EXPECT_EQ(s.calls[1].name, "b");
    EXPECT_EQ(s.calls[1].arguments, "{}");
    EXPECT_NE(s.calls[0].id, s.calls[1].id);
    expect_same_calls(s.reassembled, s.calls, step);
    // Byte by byte: one fragment per non-space byte of the arguments.
    if (step == 1) {
      EXPECT_GT(s.fragments_before_end, 20u);
    }
  }
}

TEST(ToolCallStream, WhatItCannotFollowIsParsedAtTheEnd) {
  // Keys in the other order, arguments as a string holding JSON.
  for (const char* text :
       {"<tool_call>\n{\"arguments\": {\"x\": 1}, \"name\": \"f\"}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}\n"
        "</tool_call>"}) {
    Streamed s = stream_in(ToolCallFormat::kToolCallHermes, text, 2);
    ASSERT_EQ(s.calls.size(), 1u) << text;
    EXPECT_EQ(s.calls[0].arguments, R"({"x":1})");
    EXPECT_EQ(s.fragments_before_end, 0u);
    expect_same_calls(s.reassembled, s.calls, 2);
  }
  // Cut before the arguments close (max_tokens): not a call, all content
  // (the opening delta already went out).
  const std::string cut = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1";
  Streamed s = stream_in(ToolCallFormat::kToolCallHermes, cut, 4);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, cut);
}

TEST(ToolCallStream, LlamaDecidesOnTheFirstCharacter) {
  const std::string call = "\n {\"name\": \"g\", \"parameters\": {\"v\": 1}}";
  for (size_t step = 1; step <= call.size(); ++step) {
    Streamed s = stream_in(ToolCallFormat::kToolCallLlamaJson, call, step);
    EXPECT_EQ(s.content, "") << step;
    ASSERT_EQ(s.calls.size(), 1u) << step;
    EXPECT_EQ(s.calls[0].arguments, R"({"v":1})");
    expect_same_calls(s.reassembled, s.calls, step);
  }
  ToolCallStream plain(ToolCallFormat::kToolCallLlamaJson);
  EXPECT_EQ(plain.push("  ").content, "");  // undecided
  EXPECT_EQ(plain.push("Hi {").content, "  Hi {");
  EXPECT_EQ(plain.push("\"name\"").content, "\"name\"");
  EXPECT_EQ(plain.finish().content, "");
  EXPECT_TRUE(plain.calls().empty());
}

}  // namespace
}  // namespace specstack

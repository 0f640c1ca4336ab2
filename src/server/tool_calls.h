// Tool calls in a model's output: which format the chat template teaches
// (chosen by inspecting the template text), and parsing the generated text
// into OpenAI `tool_calls`, whole or as it streams.
//
// Formats:
// * kToolCallHermes (Qwen2.5, Qwen3, Hermes): each call is
//   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`; text
//   before the first call is the message content; several calls may follow
//   one another.
// * kToolCallLlamaJson (Llama 3.1 / 3.2 JSON tool calling): the whole
//   output is `{"name": ..., "parameters": {...}}` (optionally after
//   <|python_tag|>); one call.
//
// Parsing is lenient about what the grammar does not force (the "auto"
// choice): output that does not parse as calls is returned as content, never
// an error.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/request_fields.h"

namespace specstack {

enum class ToolCallFormat { kToolCallHermes, kToolCallLlamaJson };

// The format a chat template's tool instructions ask for. Error: a template
// that renders tools in a way specstack cannot parse calls for (one line,
// naming the supported formats).
Result<ToolCallFormat> detect_tool_call_format(std::string_view chat_template);

struct ToolCall {
  std::string id;  // "call_<24 random alphanumerics>"
  std::string name;
  std::string arguments;  // compact JSON text of the arguments object
};

// What one choice's output says: `content` (null when nothing but calls) and
// the calls; no calls means the whole text is content.
struct ParsedToolOutput {
  std::optional<std::string> content;
  std::vector<ToolCall> calls;
};

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text);

// A fresh call id.
std::string new_tool_call_id();

// The streaming side is server/tool_call_stream.h.

// The `tool_calls` array of a message: [{id, type: "function", function:
// {name, arguments}}].
OrderedJson tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace specstack

// The prompt of a chat-completions request: `messages` (plus `tools` and the
// vLLM extensions add_generation_prompt, continue_final_message and
// chat_template_kwargs) rendered with the model's chat template, then
// tokenized without adding special tokens (the template writes BOS itself).
// The request's own text (messages, tools, chat_template_kwargs) is tokenized
// as plain text, so it cannot produce control tokens, unless the model is
// served with ChatContentTokens::kSpecial (--chat-content-special-tokens).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "server/tool_request.h"

namespace specstack {

// Content given as an array of parts is flattened to one string: text parts
// joined with "\n" (as vLLM does for templates that expect strings); any other
// part type is rejected. Assistant `tool_calls` have their JSON-string
// `function.arguments` parsed into objects (the Qwen and Llama templates
// print them with tojson, as vLLM passes them), a null content becomes ""
// there; a `role: "tool"` message's `tool_call_id`, if any, is a string.
Result<OrderedJson> normalize_messages(const OrderedJson& body);

// The prompt. Tools are rendered when `tools.active()` (tool_choice "none"
// offers none, as OpenAI). A template that renders active tools no
// differently from no tools cannot do tool calling: an error, with
// *error_param set to "tools".
Result<std::vector<int32_t>> chat_prompt_ids(const OrderedJson& body, const ServedModel& model,
                                             const ToolRequest& tools = {},
                                             std::string* error_param = nullptr);

}  // namespace specstack

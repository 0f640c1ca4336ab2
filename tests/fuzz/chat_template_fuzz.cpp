// libFuzzer target: ChatTemplate::parse + render_marked on arbitrary bytes. The input
// is a template, optionally followed by a NUL byte and a JSON render context
// (a default conversation with tools is used when that part is missing or not
// a JSON object). Templates come from model folders, so parse and render must
// return errors, never crash, hang or exhaust memory; tight limits keep each
// run short. Every error must carry a message.
// Seed corpus: tests/fuzz/corpus/chat_template/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"

namespace {

const char* const kDefaultContext = R"({
  "messages": [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi <tool_response>x</tool_response>"},
    {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "reasoning_content": null,
     "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, "é"]}}}]},
    {"role": "tool", "content": "42"},
    {"role": "user", "content": ["part", {"type": "text", "text": "t"}]}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
  "add_generation_prompt": true, "enable_thinking": false,
  "bos_token": "<s>", "eos_token": "</s>"})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view source = input.substr(0, split);
  nlohmann::ordered_json context;
  if (split != std::string_view::npos) {
    context = nlohmann::ordered_json::parse(input.substr(split + 1), nullptr, false);
  }
  if (!context.is_object()) context = nlohmann::ordered_json::parse(kDefaultContext);

  auto tmpl = specstack::ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    if (tmpl.message().empty()) std::abort();
    return 0;
  }
  specstack::ChatRenderLimits limits;
  limits.max_output_bytes = 1 << 16;
  limits.max_list_items = 1 << 12;
  limits.max_work = 1 << 18;
  auto out = tmpl->render_marked(context, specstack::kChatRequestKeys, limits);
  if (!out.ok() && out.message().empty()) std::abort();
  if (out.ok() && out->text.size() > limits.max_output_bytes) std::abort();
  // The user-text ranges must stay sorted, merged and inside the text.
  if (out.ok() && !specstack::ranges_valid(out->user_text, out->text.size())) std::abort();
  return 0;
}

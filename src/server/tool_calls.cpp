#include "server/tool_calls.h"

#include <random>

namespace specstack {
namespace {

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// One call's JSON object: {"name": str, "arguments" (Hermes) or "parameters"
// (Llama): object, or a string holding one}.
std::optional<ToolCall> call_from_json(std::string_view text) {
  OrderedJson call = OrderedJson::parse(trim(text), nullptr, /*allow_exceptions=*/false);
  if (!call.is_object()) return std::nullopt;
  const auto name = call.find("name");
  if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return std::nullopt;
  }
  auto args = call.find("arguments");
  if (args == call.end()) args = call.find("parameters");
  if (args == call.end()) return std::nullopt;
  OrderedJson arguments = *args;
  if (arguments.is_string()) {
    arguments = OrderedJson::parse(args->get_ref<const std::string&>(), nullptr, false);
  }
  if (!arguments.is_object()) return std::nullopt;
  return ToolCall{new_tool_call_id(), name->get<std::string>(), arguments.dump()};
}

ParsedToolOutput as_content(std::string_view text) {
  ParsedToolOutput out;
  out.content = std::string(text);
  return out;
}

ParsedToolOutput parse_hermes(std::string_view text) {
  const size_t first = text.find(kHermesOpen);
  if (first == std::string_view::npos) return as_content(text);
  ParsedToolOutput out;
  size_t pos = first;
  while ((pos = text.find(kHermesOpen, pos)) != std::string_view::npos) {
    const size_t start = pos + kHermesOpen.size();
    const size_t end = text.find(kHermesClose, start);
    // An unclosed last call still counts when its JSON is whole (the
    // closing tag is sometimes cut by max_tokens or a stop string).
    std::optional<ToolCall> call = call_from_json(
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (!call) return as_content(text);
    out.calls.push_back(std::move(*call));
    if (end == std::string_view::npos) break;
    pos = end + kHermesClose.size();
  }
  const std::string_view before = trim(text.substr(0, first));
  if (!before.empty()) out.content = std::string(before);
  return out;
}

ParsedToolOutput parse_llama_json(std::string_view text) {
  std::string_view body = trim(text);
  if (body.substr(0, kPythonTag.size()) == kPythonTag) body = trim(body.substr(kPythonTag.size()));
  if (body.empty() || body.front() != '{') return as_content(text);
  std::optional<ToolCall> call = call_from_json(body);
  if (!call) return as_content(text);
  ParsedToolOutput out;
  out.calls.push_back(std::move(*call));
  return out;
}

}  // namespace

Result<ToolCallFormat> detect_tool_call_format(std::string_view chat_template) {
  // The template's own instructions name the format it taught the model.
  if (chat_template.find(kHermesOpen) != std::string_view::npos) {
    return ToolCallFormat::kToolCallHermes;
  }
  if (chat_template.find("\"parameters\": dictionary of argument name") != std::string_view::npos ||
      chat_template.find("<|python_tag|>") != std::string_view::npos) {
    return ToolCallFormat::kToolCallLlamaJson;
  }
  return make_error(
      "the chat template's tool-call format is not one specstack can parse (supported: Hermes "
      "<tool_call> JSON as in Qwen2.5/Qwen3, Llama 3.1/3.2 JSON {\"name\", \"parameters\"})");
}

std::string new_tool_call_id() {
  static constexpr std::string_view kAlphabet =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device device;
  std::mt19937_64 rng((uint64_t(device()) << 32) ^ device());
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

ParsedToolOutput parse_tool_calls(ToolCallFormat format, std::string_view text) {
  return format == ToolCallFormat::kToolCallHermes ? parse_hermes(text) : parse_llama_json(text);
}

OrderedJson tool_calls_json(const std::vector<ToolCall>& calls) {
  OrderedJson out = OrderedJson::array();
  for (const ToolCall& call : calls) {
    OrderedJson function = OrderedJson::object();
    function["name"] = call.name;
    function["arguments"] = call.arguments;
    OrderedJson item = OrderedJson::object();
    item["id"] = call.id;
    item["type"] = "function";
    item["function"] = std::move(function);
    out.push_back(std::move(item));
  }
  return out;
}

}  // namespace specstack

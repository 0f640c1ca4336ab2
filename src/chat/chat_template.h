// Chat templates: a Jinja2 subset interpreter sufficient to render
// tokenizer_config.json chat_template strings of the Llama-3 and ChatML (Qwen2,
// Qwen2.5, Qwen3) families exactly as transformers' apply_chat_template does
// (trim_blocks, lstrip_blocks, json.dumps-style tojson, raise_exception,
// strftime_now). Unsupported syntax is a parse error that names the construct
// and offset. The interpreter lives in jinja_*.{h,cpp}: lexer -> parser (AST)
// -> tree-walking interpreter over Python-like values.
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/text_ranges.h"
#include "chat/render_limits.h"

namespace specstack {

class ChatTemplateProgram;

// A rendering and which of its bytes are user text: bytes that came from the
// request's strings rather than from the template (its literals, bos_token,
// eos_token). The server tokenizes user text without special tokens, so a
// message cannot forge the template's markup (<|im_start|>system ...).
struct ChatRender {
  std::string text;
  TextRanges user_text;  // sorted, merged byte ranges of `text`
};

// The context keys whose every string (values and object keys, at any depth)
// comes from the request.
inline constexpr std::array<std::string_view, 2> kChatRequestKeys = {"messages", "tools"};

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(std::string_view source);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // context: {"messages": [...], "add_generation_prompt": bool, "bos_token": str,
  // "eos_token": str, optional "tools", ...}. Runtime errors (raise_exception,
  // type errors, exceeded limits) come back as an Error. The context is an
  // ordered_json because Python dicts keep insertion order and `tojson` prints
  // tool schemas in it; a nlohmann::json converts implicitly, but its keys are
  // already sorted, so parse request bodies as ordered_json to match HF exactly.
  Result<std::string> render(const nlohmann::ordered_json& context,
                             const ChatRenderLimits& limits = {}) const;
  // render() that also tracks provenance: the strings under user_text_keys of
  // the context are user text, and the template's string operations carry
  // that through (exact for substrings and concatenation, the whole result
  // for other transformations; chat/jinja_marked.h).
  Result<ChatRender> render_marked(
      const nlohmann::ordered_json& context,
      std::span<const std::string_view> user_text_keys = kChatRequestKeys,
      const ChatRenderLimits& limits = {}) const;

 private:
  explicit ChatTemplate(std::unique_ptr<ChatTemplateProgram> program);
  std::unique_ptr<ChatTemplateProgram> program_;
};

}  // namespace specstack

// Chat templates: a Jinja2 subset interpreter sufficient to render
// tokenizer_config.json chat_template strings of the Llama-3 and ChatML (Qwen2,
// Qwen2.5, Qwen3) families exactly as transformers' apply_chat_template does
// (trim_blocks, lstrip_blocks, json.dumps-style tojson, raise_exception,
// strftime_now). Unsupported syntax is a parse error that names the construct
// and offset. The interpreter lives in jinja_*.{h,cpp}: lexer -> parser (AST)
// -> tree-walking interpreter over Python-like values.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/render_limits.h"

namespace specstack {

class ChatTemplateProgram;

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

 private:
  explicit ChatTemplate(std::unique_ptr<ChatTemplateProgram> program);
  std::unique_ptr<ChatTemplateProgram> program_;
};

}  // namespace specstack

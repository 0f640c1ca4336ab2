#include "chat/chat_template.h"

#include <algorithm>
#include <new>
#include <stdexcept>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_json.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace specstack {

class ChatTemplateProgram {
 public:
  explicit ChatTemplateProgram(jinja::Template t) : tmpl(std::move(t)) {}
  jinja::Template tmpl;
};

ChatTemplate::ChatTemplate(std::unique_ptr<ChatTemplateProgram> program)
    : program_(std::move(program)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  // transformers' environment: trim_blocks and lstrip_blocks on,
  // keep_trailing_newline off.
  const std::string normalized = jinja::normalize_template_source(source);
  SS_ASSIGN_OR_RETURN(jinja::Template tmpl, jinja::parse_template(normalized, jinja::LexOptions{}));
  return ChatTemplate(std::make_unique<ChatTemplateProgram>(std::move(tmpl)));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context,
                                         const ChatRenderLimits& limits) const {
  SS_ASSIGN_OR_RETURN(ChatRender rendered, render_marked(context, {}, limits));
  return std::move(rendered.text);
}

Result<ChatRender> ChatTemplate::render_marked(const nlohmann::ordered_json& context,
                                               std::span<const std::string_view> user_text_keys,
                                               const ChatRenderLimits& limits) const {
  if (!context.is_object()) return make_error("chat template context must be a JSON object");
  try {
    // Printing is capped at kMaxPrintedBytes, so larger outputs cannot be exact.
    ChatRenderLimits effective = limits;
    effective.max_output_bytes = std::min(limits.max_output_bytes, jinja::kMaxPrintedBytes);
    // The context object itself is one level of nesting.
    if (effective.max_value_depth == 0) return make_error("context JSON is nested too deeply");
    jinja::DictData variables;
    for (const auto& [key, value] : context.items()) {
      const bool from_request =
          std::find(user_text_keys.begin(), user_text_keys.end(), key) != user_text_keys.end();
      SS_ASSIGN_OR_RETURN(jinja::Value v,
                          jinja::value_from_json(value, effective.max_value_depth - 1,
                                                 from_request ? jinja::JsonStrings::kUserText
                                                              : jinja::JsonStrings::kTemplateText));
      variables.entries.emplace_back(jinja::Value::string(key), std::move(v));
    }
    SS_ASSIGN_OR_RETURN(jinja::MarkedText out,
                        jinja::render_template(program_->tmpl, variables, effective));
    return ChatRender{std::move(out.text), std::move(out.user)};
  } catch (const std::bad_alloc&) {
    // Last line of defence; the limits should stop a template long before.
    return make_error("chat template ran out of memory");
  } catch (const std::length_error&) {
    return make_error("chat template built a value that is too large");
  }
}

}  // namespace specstack

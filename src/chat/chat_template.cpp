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
  if (!context.is_object()) return make_error("chat template context must be a JSON object");
  try {
    // Printing is capped at kMaxPrintedBytes, so larger outputs cannot be exact.
    ChatRenderLimits effective = limits;
    effective.max_output_bytes = std::min(limits.max_output_bytes, jinja::kMaxPrintedBytes);
    SS_ASSIGN_OR_RETURN(jinja::Value variables,
                        jinja::value_from_json(context, effective.max_value_depth));
    return jinja::render_template(program_->tmpl, variables.as_dict(), effective);
  } catch (const std::bad_alloc&) {
    // Last line of defence; the limits should stop a template long before.
    return make_error("chat template ran out of memory");
  } catch (const std::length_error&) {
    return make_error("chat template built a value that is too large");
  }
}

}  // namespace specstack

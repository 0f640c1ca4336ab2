// Statement grammar of the Jinja2 subset: turns a template source into a
// Template tree. Supported tags: if/elif/else, for (with else, `if` filter and
// tuple targets), set (plain, block, namespace attribute), macro, break,
// continue, filter, with, raw, and transformers' generation. Anything else is
// a syntax error naming the tag and its byte offset.
#pragma once

#include <string_view>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace specstack::jinja {

// `source` must already be normalized (normalize_template_source).
Result<Template> parse_template(std::string_view source, const LexOptions& options);

}  // namespace specstack::jinja

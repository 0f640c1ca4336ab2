// Tokenizer for the Jinja2 subset: splits a template into text and tag tokens
// and applies the whitespace rules the way jinja2's lexer does (trim_blocks,
// lstrip_blocks, "-"/"+" modifiers), so the parser never sees layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace specstack::jinja {

enum class TokenKind {
  kText,
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd,  // end of template
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  size_t offset = 0;  // byte offset in the normalized source
  std::string text;   // text content, name, unescaped string or operator spelling
  int64_t int_value = 0;
  double float_value = 0.0;
};

struct LexOptions {
  bool trim_blocks = true;    // drop the first newline after a block tag
  bool lstrip_blocks = true;  // drop spaces/tabs between line start and a block tag
};

// jinja2 normalizes newlines (\r\n and \r become \n) and, without
// keep_trailing_newline, drops one trailing newline before lexing.
std::string normalize_template_source(std::string_view source);

// Lexes a normalized source; errors name the problem and its byte offset.
Result<std::vector<Token>> lex_template(std::string_view source, const LexOptions& options);

}  // namespace specstack::jinja

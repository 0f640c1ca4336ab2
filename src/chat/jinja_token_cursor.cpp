#include "chat/jinja_token_cursor.h"

#include <fmt/format.h>

#include <algorithm>

namespace specstack::jinja {
namespace {

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::kEnd:
      return "end of template";
    case TokenKind::kText:
      return "template text";
    case TokenKind::kVariableBegin:
      return "'{{'";
    case TokenKind::kVariableEnd:
      return "'}}'";
    case TokenKind::kBlockBegin:
      return "'{%'";
    case TokenKind::kBlockEnd:
      return "'%}'";
    case TokenKind::kString:
      return "string literal";
    default:
      return "'" + t.text + "'";
  }
}

}  // namespace

TokenCursor::TokenCursor(std::vector<Token> tokens) : tokens_(std::move(tokens)) {
  if (tokens_.empty() || tokens_.back().kind != TokenKind::kEnd) {
    tokens_.push_back(Token{TokenKind::kEnd, 0, "", 0, 0.0});
  }
}

const Token& TokenCursor::peek(size_t ahead) const {
  return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
}

const Token& TokenCursor::next() {
  const Token& t = peek();
  if (index_ + 1 < tokens_.size()) ++index_;
  return t;
}

bool TokenCursor::at_operator(std::string_view op) const {
  return peek().kind == TokenKind::kOperator && peek().text == op;
}

bool TokenCursor::at_name(std::string_view name, size_t ahead) const {
  return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
}

bool TokenCursor::skip_operator(std::string_view op) {
  if (!at_operator(op)) return false;
  next();
  return true;
}

bool TokenCursor::skip_name(std::string_view name) {
  if (!at_name(name)) return false;
  next();
  return true;
}

Status TokenCursor::expect_operator(std::string_view op, std::string_view context) {
  if (skip_operator(op)) return {};
  return error_here(fmt::format("expected '{}' {}", op, context));
}

Status TokenCursor::expect(TokenKind kind, std::string_view context) {
  if (peek().kind != kind) return error_here(fmt::format("expected {}", context));
  next();
  return {};
}

Result<std::string> TokenCursor::expect_name(std::string_view context) {
  if (peek().kind != TokenKind::kName)
    return error_here(fmt::format("expected a name {}", context));
  return next().text;
}

Error TokenCursor::error_here(std::string_view message) const {
  return errorf("chat template syntax error: {} at offset {} (found {})", message, peek().offset,
                describe(peek()));
}

}  // namespace specstack::jinja

// A cursor over lexer tokens with the look-ahead, skip/expect helpers and
// error messages ("... at offset N (found X)") both parsers share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_lexer.h"

namespace specstack::jinja {

class TokenCursor {
 public:
  explicit TokenCursor(std::vector<Token> tokens);

  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool at_operator(std::string_view op) const;
  bool at_name(std::string_view name, size_t ahead = 0) const;
  bool at(TokenKind kind) const { return peek().kind == kind; }
  bool skip_operator(std::string_view op);
  bool skip_name(std::string_view name);
  Status expect_operator(std::string_view op, std::string_view context);
  Status expect(TokenKind kind, std::string_view context);
  Result<std::string> expect_name(std::string_view context);
  // "<message> at offset N", naming the token found there.
  Error error_here(std::string_view message) const;

 private:
  std::vector<Token> tokens_;
  size_t index_ = 0;
};

}  // namespace specstack::jinja

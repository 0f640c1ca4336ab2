// Expression grammar of the Jinja2 subset, following jinja2's parser.py
// precedence: conditional < or < and < not < comparisons < + - < ~ < * / // %
// < ** < unary - + < postfix (.attr [item] (call)) < filters/tests.
// Used by the statement parser (jinja_parser.cpp).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_token_cursor.h"

namespace specstack::jinja {

// Hard caps that keep hostile templates from exhausting the stack: the
// interpreter recurses once per tree level.
inline constexpr uint32_t kMaxExprHeight = 192;
inline constexpr int kMaxStmtNesting = 48;

class ExprParser {
 public:
  explicit ExprParser(TokenCursor& cursor) : cur_(cursor) {}

  // with_condexpr=false stops before `if` (for-loop iterables, if conditions).
  Result<ExprPtr> parse_expression(bool with_condexpr = true);
  // Comma-separated expressions become a tuple; `end_names` end it early.
  Result<ExprPtr> parse_tuple(bool with_condexpr = true, bool explicit_parentheses = false,
                              std::initializer_list<std::string_view> end_names = {});
  // `name`, `a, b`, `(a, b)` or (with_namespace) `ns.attr`.
  Result<Target> parse_assign_target(bool with_namespace);
  // A filter application; the cursor is on the filter name (after '|').
  Result<std::unique_ptr<FilterExpr>> parse_filter(ExprPtr operand);
  // (a, b=c) with the cursor on '('.
  Result<CallArgExprs> parse_call_args();

 private:
  Result<ExprPtr> parse_condexpr();
  Result<ExprPtr> parse_or();
  Result<ExprPtr> parse_and();
  Result<ExprPtr> parse_not();
  Result<ExprPtr> parse_compare();
  Result<ExprPtr> parse_math1();
  Result<ExprPtr> parse_concat();
  Result<ExprPtr> parse_math2();
  Result<ExprPtr> parse_pow();
  Result<ExprPtr> parse_unary(bool with_filter);
  Result<ExprPtr> parse_primary();
  Result<ExprPtr> parse_postfix(ExprPtr node);
  Result<ExprPtr> parse_filter_expr(ExprPtr node);
  Result<ExprPtr> parse_subscript(ExprPtr node);
  Result<ExprPtr> parse_test(ExprPtr node);
  Result<ExprPtr> parse_list();
  Result<ExprPtr> parse_dict();
  Result<std::string> parse_dotted_name(std::string_view context);
  // Records the node's height and rejects trees too deep to evaluate safely.
  Result<ExprPtr> finish(ExprPtr node);

  TokenCursor& cur_;
  int depth_ = 0;  // live recursive parse frames
};

}  // namespace specstack::jinja

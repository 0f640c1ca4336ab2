#include "chat/jinja_expr_parser.h"

#include <algorithm>

namespace specstack::jinja {
namespace {

bool is_constant_name(std::string_view name) {
  return name == "true" || name == "false" || name == "none" || name == "True" || name == "False" ||
         name == "None";
}

// Counts live recursive parser frames so ((((...)))) cannot overflow the stack
// before the height check sees the finished tree.
class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(depth) { ++depth_; }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

// Each parenthesis level costs two guarded frames (condexpr and unary).
constexpr int kMaxParseFrames = 2 * kMaxExprHeight;

}  // namespace

Result<ExprPtr> ExprParser::finish(ExprPtr node) {
  node->height = 1 + children_height(*node);
  if (node->height > kMaxExprHeight) {
    return errorf("chat template syntax error: expression nested too deeply at offset {}",
                  node->offset);
  }
  return node;
}

Result<ExprPtr> ExprParser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

Result<ExprPtr> ExprParser::parse_condexpr() {
  DepthGuard guard(depth_);
  if (depth_ > kMaxParseFrames) return cur_.error_here("expression nested too deeply");
  SS_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
  while (cur_.at_name("if")) {
    auto node = std::make_unique<ConditionalExpr>(cur_.next().offset);
    SS_ASSIGN_OR_RETURN(node->condition, parse_or());
    if (cur_.skip_name("else")) {
      SS_ASSIGN_OR_RETURN(node->else_expr, parse_condexpr());
    }
    node->then_expr = std::move(expr);
    SS_ASSIGN_OR_RETURN(expr, finish(std::move(node)));
  }
  return expr;
}

Result<ExprPtr> ExprParser::parse_or() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
  while (cur_.at_name("or")) {
    const size_t offset = cur_.next().offset;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(
                                  offset, BinaryOp::kOr, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_and() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
  while (cur_.at_name("and")) {
    const size_t offset = cur_.next().offset;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(
                                  offset, BinaryOp::kAnd, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_not() {
  if (!cur_.at_name("not")) return parse_compare();
  DepthGuard guard(depth_);
  if (depth_ > kMaxParseFrames) return cur_.error_here("expression nested too deeply");
  const size_t offset = cur_.next().offset;
  SS_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
  return finish(std::make_unique<UnaryExpr>(offset, UnaryOp::kNot, std::move(operand)));
}

Result<ExprPtr> ExprParser::parse_compare() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_math1());
  std::unique_ptr<CompareExpr> node;
  while (true) {
    const Token& t = cur_.peek();
    CompareOp op;
    if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == ">" || t.text == "<=" || t.text == ">=")) {
      op = t.text == "=="   ? CompareOp::kEq
           : t.text == "!=" ? CompareOp::kNe
           : t.text == "<"  ? CompareOp::kLt
           : t.text == ">"  ? CompareOp::kGt
           : t.text == "<=" ? CompareOp::kLe
                            : CompareOp::kGe;
      cur_.next();
    } else if (cur_.at_name("in")) {
      op = CompareOp::kIn;
      cur_.next();
    } else if (cur_.at_name("not") && cur_.at_name("in", 1)) {
      op = CompareOp::kNotIn;
      cur_.next();
      cur_.next();
    } else {
      break;
    }
    if (!node) node = std::make_unique<CompareExpr>(t.offset, std::move(left));
    SS_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
    node->rest.emplace_back(op, std::move(rhs));
  }
  if (!node) return left;
  return finish(std::move(node));
}

Result<ExprPtr> ExprParser::parse_math1() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
  while (cur_.at_operator("+") || cur_.at_operator("-")) {
    const Token& t = cur_.next();
    const BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(t.offset, op, std::move(left),
                                                                  std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_concat() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
  while (cur_.at_operator("~")) {
    const size_t offset = cur_.next().offset;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(
                                  offset, BinaryOp::kConcat, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_math2() {
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
  while (cur_.at_operator("*") || cur_.at_operator("/") || cur_.at_operator("//") ||
         cur_.at_operator("%")) {
    const Token& t = cur_.next();
    const BinaryOp op = t.text == "*"    ? BinaryOp::kMul
                        : t.text == "/"  ? BinaryOp::kDiv
                        : t.text == "//" ? BinaryOp::kFloorDiv
                                         : BinaryOp::kMod;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(t.offset, op, std::move(left),
                                                                  std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_pow() {
  // jinja2 makes ** left-associative (2 ** 3 ** 2 == 64), unlike Python.
  SS_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
  while (cur_.at_operator("**")) {
    const size_t offset = cur_.next().offset;
    SS_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
    SS_ASSIGN_OR_RETURN(left, finish(std::make_unique<BinaryExpr>(
                                  offset, BinaryOp::kPow, std::move(left), std::move(right))));
  }
  return left;
}

Result<ExprPtr> ExprParser::parse_unary(bool with_filter) {
  DepthGuard guard(depth_);
  if (depth_ > kMaxParseFrames) return cur_.error_here("expression nested too deeply");
  ExprPtr node;
  if (cur_.at_operator("-") || cur_.at_operator("+")) {
    const Token& t = cur_.next();
    SS_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
    SS_ASSIGN_OR_RETURN(
        node, finish(std::make_unique<UnaryExpr>(
                  t.offset, t.text == "-" ? UnaryOp::kNeg : UnaryOp::kPos, std::move(operand))));
  } else {
    SS_ASSIGN_OR_RETURN(node, parse_primary());
  }
  SS_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
  if (with_filter) {
    SS_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
  }
  return node;
}

Result<ExprPtr> ExprParser::parse_primary() {
  const Token& t = cur_.peek();
  switch (t.kind) {
    case TokenKind::kName: {
      cur_.next();
      if (t.text == "true" || t.text == "True")
        return ExprPtr(new LiteralExpr(t.offset, Value::boolean(true)));
      if (t.text == "false" || t.text == "False") {
        return ExprPtr(new LiteralExpr(t.offset, Value::boolean(false)));
      }
      if (t.text == "none" || t.text == "None")
        return ExprPtr(new LiteralExpr(t.offset, Value::none()));
      return ExprPtr(new NameExpr(t.offset, t.text));
    }
    case TokenKind::kString: {
      // Adjacent string literals concatenate, as in Python.
      std::string text;
      const size_t offset = t.offset;
      while (cur_.at(TokenKind::kString)) text += cur_.next().text;
      return ExprPtr(new LiteralExpr(offset, Value::string(std::move(text))));
    }
    case TokenKind::kInteger:
      cur_.next();
      return ExprPtr(new LiteralExpr(t.offset, Value::integer(t.int_value)));
    case TokenKind::kFloat:
      cur_.next();
      return ExprPtr(new LiteralExpr(t.offset, Value::floating(t.float_value)));
    default:
      break;
  }
  if (cur_.skip_operator("(")) {
    SS_ASSIGN_OR_RETURN(ExprPtr node, parse_tuple(true, true));
    SS_TRY(cur_.expect_operator(")", "to close '('"));
    return node;
  }
  if (cur_.at_operator("[")) return parse_list();
  if (cur_.at_operator("{")) return parse_dict();
  return cur_.error_here("unexpected token in expression");
}

Result<ExprPtr> ExprParser::parse_tuple(bool with_condexpr, bool explicit_parentheses,
                                        std::initializer_list<std::string_view> end_names) {
  const size_t offset = cur_.peek().offset;
  auto is_end = [&] {
    if (cur_.at(TokenKind::kVariableEnd) || cur_.at(TokenKind::kBlockEnd) ||
        cur_.at_operator(")")) {
      return true;
    }
    return std::any_of(end_names.begin(), end_names.end(),
                       [&](std::string_view n) { return cur_.at_name(n); });
  };
  auto tuple = std::make_unique<ListExpr>(offset);
  tuple->is_tuple = true;
  bool is_tuple = false;
  while (true) {
    if (!tuple->items.empty()) SS_TRY(cur_.expect_operator(",", "between tuple items"));
    if (is_end()) break;
    SS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression(with_condexpr));
    tuple->items.push_back(std::move(item));
    if (!cur_.at_operator(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!tuple->items.empty()) return std::move(tuple->items[0]);
    if (!explicit_parentheses) return cur_.error_here("expected an expression");
  }
  return finish(std::move(tuple));
}

Result<ExprPtr> ExprParser::parse_list() {
  auto node = std::make_unique<ListExpr>(cur_.next().offset);
  while (!cur_.at_operator("]")) {
    if (!node->items.empty()) SS_TRY(cur_.expect_operator(",", "between list items"));
    if (cur_.at_operator("]")) break;
    SS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
    node->items.push_back(std::move(item));
  }
  SS_TRY(cur_.expect_operator("]", "to close the list"));
  return finish(std::move(node));
}

Result<ExprPtr> ExprParser::parse_dict() {
  auto node = std::make_unique<DictExpr>(cur_.next().offset);
  while (!cur_.at_operator("}")) {
    if (!node->entries.empty()) SS_TRY(cur_.expect_operator(",", "between dict items"));
    if (cur_.at_operator("}")) break;
    SS_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
    SS_TRY(cur_.expect_operator(":", "after a dict key"));
    SS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
    node->entries.emplace_back(std::move(key), std::move(value));
  }
  SS_TRY(cur_.expect_operator("}", "to close the dict"));
  return finish(std::move(node));
}

Result<ExprPtr> ExprParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (cur_.at_operator(".") || cur_.at_operator("[")) {
      SS_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
    } else if (cur_.at_operator("(")) {
      const size_t offset = cur_.peek().offset;
      auto call = std::make_unique<CallExpr>(offset, std::move(node));
      SS_ASSIGN_OR_RETURN(call->args, parse_call_args());
      SS_ASSIGN_OR_RETURN(node, finish(std::move(call)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> ExprParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (cur_.skip_operator("|")) {
      SS_ASSIGN_OR_RETURN(auto filter, parse_filter(std::move(node)));
      node = std::move(filter);
    } else if (cur_.at_name("is")) {
      SS_ASSIGN_OR_RETURN(node, parse_test(std::move(node)));
    } else if (cur_.at_operator("(")) {
      const size_t offset = cur_.peek().offset;
      auto call = std::make_unique<CallExpr>(offset, std::move(node));
      SS_ASSIGN_OR_RETURN(call->args, parse_call_args());
      SS_ASSIGN_OR_RETURN(node, finish(std::move(call)));
    } else {
      return node;
    }
  }
}

Result<ExprPtr> ExprParser::parse_subscript(ExprPtr node) {
  const Token& t = cur_.next();
  if (t.text == ".") {
    const Token& attr = cur_.peek();
    if (attr.kind == TokenKind::kName) {
      cur_.next();
      return finish(std::make_unique<GetAttrExpr>(t.offset, std::move(node), attr.text));
    }
    if (attr.kind != TokenKind::kInteger)
      return cur_.error_here("expected a name or number after '.'");
    cur_.next();
    return finish(std::make_unique<GetItemExpr>(
        t.offset, std::move(node),
        ExprPtr(new LiteralExpr(attr.offset, Value::integer(attr.int_value)))));
  }
  // '[': an index or a slice start:stop:step, each part optional.
  ExprPtr parts[3];
  int n_colons = 0;
  if (!cur_.at_operator(":")) {
    SS_ASSIGN_OR_RETURN(parts[0], parse_expression());
  }
  while (n_colons < 2 && cur_.skip_operator(":")) {
    ++n_colons;
    if (!cur_.at_operator(":") && !cur_.at_operator("]")) {
      SS_ASSIGN_OR_RETURN(parts[n_colons], parse_expression());
    }
  }
  if (cur_.at_operator(",")) return cur_.error_here("tuple subscripts are not supported");
  SS_TRY(cur_.expect_operator("]", "to close the subscript"));
  if (n_colons == 0)
    return finish(std::make_unique<GetItemExpr>(t.offset, std::move(node), std::move(parts[0])));
  auto slice = std::make_unique<SliceExpr>(t.offset);
  slice->object = std::move(node);
  slice->start = std::move(parts[0]);
  slice->stop = std::move(parts[1]);
  slice->step = std::move(parts[2]);
  return finish(std::move(slice));
}

Result<std::string> ExprParser::parse_dotted_name(std::string_view context) {
  SS_ASSIGN_OR_RETURN(std::string name, cur_.expect_name(context));
  while (cur_.skip_operator(".")) {
    SS_ASSIGN_OR_RETURN(std::string part, cur_.expect_name(context));
    name += "." + part;
  }
  return name;
}

Result<ExprPtr> ExprParser::parse_test(ExprPtr node) {
  const size_t offset = cur_.next().offset;  // 'is'
  const bool negated = cur_.skip_name("not");
  const size_t name_offset = cur_.peek().offset;
  SS_ASSIGN_OR_RETURN(std::string name, parse_dotted_name("after 'is'"));
  const TestFn fn = find_test(name);
  if (fn == nullptr) {
    return errorf("chat template syntax error: no test named '{}' at offset {}", name, name_offset);
  }
  auto test = std::make_unique<TestExpr>(offset, name, fn);
  test->operand = std::move(node);
  test->negated = negated;
  if (cur_.at_operator("(")) {
    SS_ASSIGN_OR_RETURN(test->args, parse_call_args());
  } else {
    // jinja2 takes one bare argument: `x is divisibleby 3`, `x is sameas none`.
    const Token& t = cur_.peek();
    const bool starts_arg = t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
                            t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat ||
                            cur_.at_operator("[") || cur_.at_operator("{");
    if (starts_arg && !cur_.at_name("else") && !cur_.at_name("or") && !cur_.at_name("and")) {
      if (cur_.at_name("is")) return cur_.error_here("cannot chain multiple tests with 'is'");
      SS_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
      SS_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
      test->args.positional.push_back(std::move(arg));
    }
  }
  return finish(std::move(test));
}

Result<std::unique_ptr<FilterExpr>> ExprParser::parse_filter(ExprPtr operand) {
  const size_t offset = cur_.peek().offset;
  SS_ASSIGN_OR_RETURN(std::string name, parse_dotted_name("after '|'"));
  const FilterFn fn = find_filter(name);
  if (fn == nullptr) {
    return errorf("chat template syntax error: no filter named '{}' at offset {}", name, offset);
  }
  auto filter = std::make_unique<FilterExpr>(offset, name, fn);
  filter->operand = std::move(operand);
  if (cur_.at_operator("(")) {
    SS_ASSIGN_OR_RETURN(filter->args, parse_call_args());
  }
  filter->height = 1 + children_height(*filter);
  if (filter->height > kMaxExprHeight) {
    return errorf("chat template syntax error: expression nested too deeply at offset {}", offset);
  }
  return filter;
}

Result<CallArgExprs> ExprParser::parse_call_args() {
  SS_TRY(cur_.expect_operator("(", "to start the arguments"));
  CallArgExprs args;
  bool first = true;
  while (!cur_.at_operator(")")) {
    if (!first) {
      SS_TRY(cur_.expect_operator(",", "between arguments"));
      if (cur_.at_operator(")")) break;
    }
    first = false;
    if (cur_.at_operator("*") || cur_.at_operator("**")) {
      return cur_.error_here("*args and **kwargs are not supported");
    }
    if (cur_.peek().kind == TokenKind::kName && cur_.peek(1).kind == TokenKind::kOperator &&
        cur_.peek(1).text == "=") {
      std::string name = cur_.next().text;
      cur_.next();
      SS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      args.keyword.emplace_back(std::move(name), std::move(value));
    } else {
      if (!args.keyword.empty())
        return cur_.error_here("positional argument follows keyword argument");
      SS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      args.positional.push_back(std::move(value));
    }
  }
  SS_TRY(cur_.expect_operator(")", "to close the arguments"));
  return args;
}

Result<Target> ExprParser::parse_assign_target(bool with_namespace) {
  Target target;
  if (with_namespace && cur_.peek().kind == TokenKind::kName &&
      cur_.peek(1).kind == TokenKind::kOperator && cur_.peek(1).text == ".") {
    target.names.push_back(cur_.next().text);
    cur_.next();
    SS_ASSIGN_OR_RETURN(target.attr, cur_.expect_name("after '.' in an assignment"));
    return target;
  }
  const bool parens = cur_.skip_operator("(");
  while (true) {
    const size_t offset = cur_.peek().offset;
    SS_ASSIGN_OR_RETURN(std::string name, cur_.expect_name("as assignment target"));
    if (is_constant_name(name)) {
      return errorf("chat template syntax error: cannot assign to '{}' at offset {}", name, offset);
    }
    target.names.push_back(std::move(name));
    if (!cur_.skip_operator(",")) break;
    target.unpack = true;
    if (cur_.at_operator(")") || cur_.at_operator("=") || cur_.at_name("in") ||
        cur_.at(TokenKind::kBlockEnd)) {
      break;
    }
  }
  if (parens) SS_TRY(cur_.expect_operator(")", "to close the target list"));
  return target;
}

}  // namespace specstack::jinja

// Expression evaluation.
#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_util.h"

namespace specstack::jinja {
namespace {

// Kinds whose result is a fresh string or container (so building it cost
// its size), as opposed to lookups that share an existing one.
bool builds_value(ExprKind kind) {
  return kind == ExprKind::kList || kind == ExprKind::kDict || kind == ExprKind::kSlice ||
         kind == ExprKind::kCall || kind == ExprKind::kFilter || kind == ExprKind::kBinary ||
         kind == ExprKind::kGetItem;  // a string index decodes the string
}

}  // namespace

Result<Value> Interpreter::eval(const Expr& expr, Scope& scope) {
  SS_ASSIGN_OR_RETURN(Value v, eval_node(expr, scope));
  SS_TRY(account(v, expr.kind, expr.offset));
  return v;
}

Status Interpreter::account(const Value& v, ExprKind kind, size_t offset) {
  uint64_t units = 1;
  if (v.is_string()) {
    if (v.as_string().size() > limits_.max_output_bytes) {
      return at(offset, fmt::format("string value exceeds {} bytes", limits_.max_output_bytes));
    }
    if (builds_value(kind)) units += v.as_string().size() / 64;
  } else if (v.is_list() || v.is_dict()) {
    const size_t n = v.is_list() ? v.as_list().items.size() : v.as_dict().entries.size();
    if (n > limits_.max_list_items) {
      return at(offset, fmt::format("value holds more than {} items", limits_.max_list_items));
    }
    if (builds_value(kind)) units += n / 8;
  }
  if (v.depth() > limits_.max_value_depth) {
    return at(offset, fmt::format("value nested deeper than {}", limits_.max_value_depth));
  }
  return charge(units, offset);
}

Result<Value> Interpreter::eval_node(const Expr& expr, Scope& scope) {
  auto located = [&](Result<Value> r) -> Result<Value> {
    if (!r.ok()) return at(expr.offset, r.message());
    return r;
  };
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return static_cast<const LiteralExpr&>(expr).value;
    case ExprKind::kName: {
      const auto& name = static_cast<const NameExpr&>(expr).name;
      const Value* v = scope.find(name);
      return v != nullptr ? *v : Value::undefined(fmt::format("'{}' is undefined", name));
    }
    case ExprKind::kList: {
      const auto& list = static_cast<const ListExpr&>(expr);
      std::vector<Value> items;
      items.reserve(list.items.size());
      for (const auto& item : list.items) {
        SS_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items), list.is_tuple);
    }
    case ExprKind::kDict:
      return eval_dict(static_cast<const DictExpr&>(expr), scope);
    case ExprKind::kGetAttr: {
      const auto& node = static_cast<const GetAttrExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value object, eval(*node.object, scope));
      return located(get_attr(object, node.attr));
    }
    case ExprKind::kGetItem: {
      const auto& node = static_cast<const GetItemExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value object, eval(*node.object, scope));
      SS_ASSIGN_OR_RETURN(Value index, eval(*node.index, scope));
      return located(get_item(object, index));
    }
    case ExprKind::kSlice: {
      const auto& node = static_cast<const SliceExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value object, eval(*node.object, scope));
      Value parts[3] = {Value::none(), Value::none(), Value::none()};
      const Expr* exprs[3] = {node.start.get(), node.stop.get(), node.step.get()};
      for (int i = 0; i < 3; ++i) {
        if (exprs[i] != nullptr) {
          SS_ASSIGN_OR_RETURN(parts[i], eval(*exprs[i], scope));
        }
      }
      return located(get_slice(object, parts[0], parts[1], parts[2]));
    }
    case ExprKind::kCall:
      return eval_call(static_cast<const CallExpr&>(expr), scope);
    case ExprKind::kFilter: {
      const auto& node = static_cast<const FilterExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value operand, eval(*node.operand, scope));
      return apply_filter(node, operand, scope);
    }
    case ExprKind::kTest: {
      const auto& node = static_cast<const TestExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value operand, eval(*node.operand, scope));
      SS_ASSIGN_OR_RETURN(CallArgs args, eval_args(node.args, scope));
      auto passed = node.fn(operand, args);
      if (!passed.ok()) return at(expr.offset, passed.message());
      return Value::boolean(*passed != node.negated);
    }
    case ExprKind::kUnary: {
      const auto& node = static_cast<const UnaryExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value operand, eval(*node.operand, scope));
      return located(unary_op(node.op, operand));
    }
    case ExprKind::kBinary: {
      const auto& node = static_cast<const BinaryExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value lhs, eval(*node.lhs, scope));
      // and/or short-circuit and yield an operand, as in Python.
      if (node.op == BinaryOp::kAnd && !lhs.truthy()) return lhs;
      if (node.op == BinaryOp::kOr && lhs.truthy()) return lhs;
      SS_ASSIGN_OR_RETURN(Value rhs, eval(*node.rhs, scope));
      if (node.op == BinaryOp::kAnd || node.op == BinaryOp::kOr) return rhs;
      return located(
          binary_op(node.op, lhs, rhs, limits_.max_output_bytes, limits_.max_list_items));
    }
    case ExprKind::kCompare:
      return eval_compare(static_cast<const CompareExpr&>(expr), scope);
    case ExprKind::kConditional: {
      const auto& node = static_cast<const ConditionalExpr&>(expr);
      SS_ASSIGN_OR_RETURN(Value condition, eval(*node.condition, scope));
      if (condition.truthy()) return eval(*node.then_expr, scope);
      if (node.else_expr) return eval(*node.else_expr, scope);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return at(expr.offset, "unknown expression");
}

Result<Value> Interpreter::eval_dict(const DictExpr& expr, Scope& scope) {
  DictData dict;
  for (const auto& [key_expr, value_expr] : expr.entries) {
    SS_ASSIGN_OR_RETURN(Value key, eval(*key_expr, scope));
    if ((key.is_list() && !key.as_list().is_tuple) || key.is_dict() || key.is_namespace() ||
        key.is_undefined()) {
      return at(key_expr->offset, fmt::format("unhashable dict key of type '{}'", key.type_name()));
    }
    SS_ASSIGN_OR_RETURN(Value value, eval(*value_expr, scope));
    bool replaced = false;
    for (auto& entry : dict.entries) {
      if (values_equal(entry.first, key)) {
        entry.second = value;  // Python keeps the first position, last value
        replaced = true;
        break;
      }
    }
    if (!replaced) dict.entries.emplace_back(std::move(key), std::move(value));
  }
  return Value::dict(std::move(dict));
}

Result<CallArgs> Interpreter::eval_args(const CallArgExprs& args, Scope& scope) {
  CallArgs out;
  for (const auto& e : args.positional) {
    SS_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    out.positional.push_back(std::move(v));
  }
  for (const auto& [name, e] : args.keyword) {
    SS_ASSIGN_OR_RETURN(Value v, eval(*e, scope));
    out.keyword.emplace_back(name, std::move(v));
  }
  return out;
}

Result<Value> Interpreter::eval_call(const CallExpr& expr, Scope& scope) {
  SS_ASSIGN_OR_RETURN(Value callee, eval(*expr.callee, scope));
  SS_ASSIGN_OR_RETURN(CallArgs args, eval_args(expr.args, scope));
  if (!callee.is_function()) {
    if (callee.is_undefined()) return at(expr.offset, undefined_message(callee));
    return at(expr.offset, fmt::format("'{}' object is not callable", callee.type_name()));
  }
  const FunctionData& fn = callee.as_function();  // `callee` keeps it alive
  Result<Value> result = fn.fn(args);
  if (!result.ok() && !fn.errors_are_final) return at(expr.offset, result.message());
  return result;
}

Result<Value> Interpreter::apply_filter(const FilterExpr& filter, const Value& operand,
                                        Scope& scope) {
  SS_ASSIGN_OR_RETURN(CallArgs args, eval_args(filter.args, scope));
  Result<Value> result = filter.fn(operand, args);
  if (!result.ok()) {
    return at(filter.offset, fmt::format("filter '{}': {}", filter.name, result.message()));
  }
  return result;
}

Result<Value> Interpreter::eval_compare(const CompareExpr& expr, Scope& scope) {
  SS_ASSIGN_OR_RETURN(Value left, eval(*expr.lhs, scope));
  for (const auto& [op, rhs_expr] : expr.rest) {
    SS_ASSIGN_OR_RETURN(Value right, eval(*rhs_expr, scope));
    auto holds = compare_op(op, left, right);
    if (!holds.ok()) return at(rhs_expr->offset, holds.message());
    if (!*holds) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace specstack::jinja

#include "chat/jinja_ast.h"

#include <algorithm>

namespace specstack::jinja {
namespace {

uint32_t height_of(const ExprPtr& e) {
  return e ? e->height : 0;
}

uint32_t height_of(const CallArgExprs& args) {
  uint32_t h = 0;
  for (const auto& a : args.positional) h = std::max(h, height_of(a));
  for (const auto& [name, a] : args.keyword) h = std::max(h, height_of(a));
  return h;
}

}  // namespace

uint32_t children_height(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kLiteral:
    case ExprKind::kName:
      return 0;
    case ExprKind::kList: {
      uint32_t h = 0;
      for (const auto& item : static_cast<const ListExpr&>(e).items)
        h = std::max(h, height_of(item));
      return h;
    }
    case ExprKind::kDict: {
      uint32_t h = 0;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).entries) {
        h = std::max({h, height_of(k), height_of(v)});
      }
      return h;
    }
    case ExprKind::kGetAttr:
      return height_of(static_cast<const GetAttrExpr&>(e).object);
    case ExprKind::kGetItem: {
      const auto& n = static_cast<const GetItemExpr&>(e);
      return std::max(height_of(n.object), height_of(n.index));
    }
    case ExprKind::kSlice: {
      const auto& n = static_cast<const SliceExpr&>(e);
      return std::max(
          {height_of(n.object), height_of(n.start), height_of(n.stop), height_of(n.step)});
    }
    case ExprKind::kCall: {
      const auto& n = static_cast<const CallExpr&>(e);
      return std::max(height_of(n.callee), height_of(n.args));
    }
    case ExprKind::kFilter: {
      const auto& n = static_cast<const FilterExpr&>(e);
      return std::max(height_of(n.operand), height_of(n.args));
    }
    case ExprKind::kTest: {
      const auto& n = static_cast<const TestExpr&>(e);
      return std::max(height_of(n.operand), height_of(n.args));
    }
    case ExprKind::kUnary:
      return height_of(static_cast<const UnaryExpr&>(e).operand);
    case ExprKind::kBinary: {
      const auto& n = static_cast<const BinaryExpr&>(e);
      return std::max(height_of(n.lhs), height_of(n.rhs));
    }
    case ExprKind::kCompare: {
      const auto& n = static_cast<const CompareExpr&>(e);
      uint32_t h = height_of(n.lhs);
      for (const auto& [op, rhs] : n.rest) h = std::max(h, height_of(rhs));
      return h;
    }
    case ExprKind::kConditional: {
      const auto& n = static_cast<const ConditionalExpr&>(e);
      return std::max({height_of(n.condition), height_of(n.then_expr), height_of(n.else_expr)});
    }
  }
  return 0;
}

}  // namespace specstack::jinja

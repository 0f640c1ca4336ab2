// Syntax tree of a parsed chat template. Nodes are plain structs tagged with
// a kind; the interpreter switches on the kind. Every node keeps the byte
// offset of its source so runtime errors can point at the template.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_builtins.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

enum class ExprKind {
  kLiteral,
  kName,
  kList,  // list or tuple display
  kDict,
  kGetAttr,
  kGetItem,
  kSlice,
  kCall,
  kFilter,
  kTest,
  kUnary,
  kBinary,
  kCompare,
  kConditional,
};

enum class UnaryOp { kNot, kNeg, kPos };
enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat, kAnd, kOr };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  Expr(ExprKind k, size_t o) : kind(k), offset(o) {}
  virtual ~Expr() = default;
  ExprKind kind;
  size_t offset;
  uint32_t height = 1;  // levels of the subtree; the parser caps it
};
using ExprPtr = std::unique_ptr<Expr>;

// Height of the tallest child subtree (0 for leaves); the parser sets
// Expr::height from it.
uint32_t children_height(const Expr& e);

struct CallArgExprs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(size_t o, Value v) : Expr(ExprKind::kLiteral, o), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(size_t o, std::string n) : Expr(ExprKind::kName, o), name(std::move(n)) {}
  std::string name;
};

struct ListExpr : Expr {
  explicit ListExpr(size_t o) : Expr(ExprKind::kList, o) {}
  std::vector<ExprPtr> items;
  bool is_tuple = false;
};

struct DictExpr : Expr {
  explicit DictExpr(size_t o) : Expr(ExprKind::kDict, o) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
};

struct GetAttrExpr : Expr {
  GetAttrExpr(size_t o, ExprPtr obj, std::string a)
      : Expr(ExprKind::kGetAttr, o), object(std::move(obj)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetItemExpr : Expr {
  GetItemExpr(size_t o, ExprPtr obj, ExprPtr i)
      : Expr(ExprKind::kGetItem, o), object(std::move(obj)), index(std::move(i)) {}
  ExprPtr object;
  ExprPtr index;
};

struct SliceExpr : Expr {  // object[start:stop:step]; absent parts are null
  explicit SliceExpr(size_t o) : Expr(ExprKind::kSlice, o) {}
  ExprPtr object, start, stop, step;
};

struct CallExpr : Expr {
  CallExpr(size_t o, ExprPtr c) : Expr(ExprKind::kCall, o), callee(std::move(c)) {}
  ExprPtr callee;
  CallArgExprs args;
};

struct FilterExpr : Expr {
  FilterExpr(size_t o, std::string n, FilterFn f)
      : Expr(ExprKind::kFilter, o), name(std::move(n)), fn(f) {}
  ExprPtr operand;  // null inside {% filter %}: the operand is the block's output
  std::string name;
  FilterFn fn;
  CallArgExprs args;
};

struct TestExpr : Expr {
  TestExpr(size_t o, std::string n, TestFn f)
      : Expr(ExprKind::kTest, o), name(std::move(n)), fn(f) {}
  ExprPtr operand;
  std::string name;
  TestFn fn;
  CallArgExprs args;
  bool negated = false;  // `is not`
};

struct UnaryExpr : Expr {
  UnaryExpr(size_t o, UnaryOp p, ExprPtr e)
      : Expr(ExprKind::kUnary, o), op(p), operand(std::move(e)) {}
  UnaryOp op;
  ExprPtr operand;
};

struct BinaryExpr : Expr {
  BinaryExpr(size_t o, BinaryOp p, ExprPtr l, ExprPtr r)
      : Expr(ExprKind::kBinary, o), op(p), lhs(std::move(l)), rhs(std::move(r)) {}
  BinaryOp op;
  ExprPtr lhs, rhs;
};

struct CompareExpr : Expr {  // a < b <= c chains like Python
  CompareExpr(size_t o, ExprPtr first) : Expr(ExprKind::kCompare, o), lhs(std::move(first)) {}
  ExprPtr lhs;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};

struct ConditionalExpr : Expr {  // then_expr if condition else else_expr
  explicit ConditionalExpr(size_t o) : Expr(ExprKind::kConditional, o) {}
  ExprPtr condition, then_expr, else_expr;  // else_expr may be null (-> undefined)
};

enum class StmtKind {
  kText,
  kOutput,
  kIf,
  kFor,
  kSet,
  kSetBlock,
  kMacro,
  kBreak,
  kContinue,
  kFilterBlock,
  kScope,
};

struct Stmt {
  Stmt(StmtKind k, size_t o) : kind(k), offset(o) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  size_t offset;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(size_t o, std::string t) : Stmt(StmtKind::kText, o), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(size_t o, ExprPtr e) : Stmt(StmtKind::kOutput, o), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(size_t o) : Stmt(StmtKind::kIf, o) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body else_body;
};

// Assignment targets: one name, several names (unpacking), or ns.attr.
struct Target {
  std::vector<std::string> names;
  bool unpack = false;
  std::string attr;  // non-empty: {% set names[0].attr = ... %}
};

struct ForStmt : Stmt {
  explicit ForStmt(size_t o) : Stmt(StmtKind::kFor, o) {}
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`, may be null
  Body body;
  Body else_body;  // runs when nothing was iterated
};

struct SetStmt : Stmt {
  explicit SetStmt(size_t o) : Stmt(StmtKind::kSet, o) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set x %}...{% endset %}
  explicit SetBlockStmt(size_t o) : Stmt(StmtKind::kSetBlock, o) {}
  Target target;
  std::vector<std::unique_ptr<FilterExpr>> filters;  // {% set x | upper %}
  Body body;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(size_t o) : Stmt(StmtKind::kMacro, o) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default may be null
  Body body;
};

struct FilterBlockStmt : Stmt {  // {% filter f|g %}...{% endfilter %}
  explicit FilterBlockStmt(size_t o) : Stmt(StmtKind::kFilterBlock, o) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};

// {% with a = 1 %} and transformers' {% generation %}: a body in its own scope.
struct ScopeStmt : Stmt {
  explicit ScopeStmt(size_t o) : Stmt(StmtKind::kScope, o) {}
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  Body body;
};

struct BreakStmt : Stmt {
  explicit BreakStmt(size_t o) : Stmt(StmtKind::kBreak, o) {}
};

struct ContinueStmt : Stmt {
  explicit ContinueStmt(size_t o) : Stmt(StmtKind::kContinue, o) {}
};

struct Template {
  Body body;
};

}  // namespace specstack::jinja

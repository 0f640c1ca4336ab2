// Tree-walking interpreter for parsed chat templates. Scoping follows jinja2:
// `if` shares its scope, every for-loop iteration, macro call and `with`
// block gets a child scope, so {% set %} inside a loop does not leak out
// (which is why templates use namespace objects). Templates come from model
// folders, so every render is bounded: output size, value size and nesting,
// macro recursion and total work.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_marked.h"
#include "chat/jinja_value.h"
#include "chat/render_limits.h"

namespace specstack::jinja {

// Limits are part of the public chat-template API (chat/render_limits.h).
using RenderLimits = ChatRenderLimits;

// One variable scope; lookups fall through to the parent.
class Scope {
 public:
  explicit Scope(const Scope* parent) : parent_(parent) {}
  const Value* find(std::string_view name) const;
  void set(std::string_view name, Value value);

 private:
  const Scope* parent_;
  std::vector<std::pair<std::string, Value>> vars_;  // few per scope: linear is fastest
};

// Renders `tmpl` with the context variables (already converted from JSON)
// layered over the builtin globals: the text and which bytes are user text.
Result<MarkedText> render_template(const Template& tmpl, const DictData& context,
                                   const RenderLimits& limits);

// Implementation detail shared by jinja_exec.cpp and jinja_eval.cpp.
class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, Scope* top) : limits_(limits), top_(top) {}

  enum class Flow { kNormal, kBreak, kContinue };
  Result<Flow> exec_body(const Body& body, Scope& scope, MarkedText& out);
  Result<Value> eval(const Expr& expr, Scope& scope);

 private:
  Result<Flow> exec(const Stmt& stmt, Scope& scope, MarkedText& out);
  Result<Flow> exec_if(const IfStmt& stmt, Scope& scope, MarkedText& out);
  Result<Flow> exec_for(const ForStmt& stmt, Scope& scope, MarkedText& out);
  // Blocks pass a break/continue from their body on to the enclosing loop.
  Result<Flow> exec_set_block(const SetBlockStmt& stmt, Scope& scope);
  Result<Flow> exec_filter_block(const FilterBlockStmt& stmt, Scope& scope, MarkedText& out);
  Result<Flow> exec_scope(const ScopeStmt& stmt, Scope& scope, MarkedText& out);
  Status assign(const Target& target, Value value, Scope& scope, size_t offset);
  Value make_macro(const MacroStmt& stmt);
  Result<Value> call_macro(const MacroStmt& stmt, const CallArgs& args);
  Value loop_object(const std::vector<Value>& items, size_t index);
  // Appends template text, or a string value with its user-text ranges.
  Status append(MarkedText& out, std::string_view text, size_t offset);
  Status append(MarkedText& out, const Value& value, size_t offset);

  Result<Value> eval_node(const Expr& expr, Scope& scope);
  Result<Value> eval_dict(const DictExpr& expr, Scope& scope);
  Result<Value> eval_call(const CallExpr& expr, Scope& scope);
  Result<Value> eval_compare(const CompareExpr& expr, Scope& scope);
  Result<CallArgs> eval_args(const CallArgExprs& args, Scope& scope);
  Result<Value> apply_filter(const FilterExpr& filter, const Value& operand, Scope& scope);
  // Accounts for one evaluated value and enforces the size/depth limits.
  Status account(const Value& value, ExprKind kind, size_t offset);
  Status charge(uint64_t units, size_t offset);
  Error at(size_t offset, std::string_view message) const;

  const RenderLimits& limits_;
  Scope* top_;  // template-level scope; macros resolve free names here
  uint64_t work_ = 0;
  int call_depth_ = 0;
};

}  // namespace specstack::jinja

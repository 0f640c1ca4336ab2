// Statement execution: text, output, if/for/set/macro/filter/with blocks.
#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "chat/jinja_util.h"

namespace specstack::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_) {
    for (const auto& [n, v] : s->vars_) {
      if (n == name) return &v;
    }
  }
  return nullptr;
}

void Scope::set(std::string_view name, Value value) {
  for (auto& [n, v] : vars_) {
    if (n == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
}

Error Interpreter::at(size_t offset, std::string_view message) const {
  return errorf("chat template error at offset {}: {}", offset, message);
}

Status Interpreter::charge(uint64_t units, size_t offset) {
  work_ += units;
  if (work_ > limits_.max_work) return at(offset, "template exceeded its work limit");
  return {};
}

Status Interpreter::append(MarkedText& out, std::string_view text, size_t offset) {
  if (out.text.size() + text.size() > limits_.max_output_bytes) {
    return at(offset, fmt::format("rendered output exceeds {} bytes", limits_.max_output_bytes));
  }
  out.append(text);
  return {};
}

Status Interpreter::append(MarkedText& out, const Value& value, size_t offset) {
  // Strings append in place (with their ranges); anything else prints first.
  const Value printed = to_marked_str(value);
  if (out.text.size() + printed.as_string().size() > limits_.max_output_bytes) {
    return at(offset, fmt::format("rendered output exceeds {} bytes", limits_.max_output_bytes));
  }
  out.append(printed.as_string(), printed.user_ranges());
  return {};
}

Result<Interpreter::Flow> Interpreter::exec_body(const Body& body, Scope& scope, MarkedText& out) {
  for (const StmtPtr& stmt : body) {
    SS_ASSIGN_OR_RETURN(Flow flow, exec(*stmt, scope, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec(const Stmt& stmt, Scope& scope, MarkedText& out) {
  SS_TRY(charge(1, stmt.offset));
  switch (stmt.kind) {
    case StmtKind::kText:
      SS_TRY(append(out, static_cast<const TextStmt&>(stmt).text, stmt.offset));
      return Flow::kNormal;
    case StmtKind::kOutput: {
      SS_ASSIGN_OR_RETURN(Value v, eval(*static_cast<const OutputStmt&>(stmt).expr, scope));
      SS_TRY(append(out, v, stmt.offset));
      return Flow::kNormal;
    }
    case StmtKind::kIf:
      return exec_if(static_cast<const IfStmt&>(stmt), scope, out);
    case StmtKind::kFor:
      return exec_for(static_cast<const ForStmt&>(stmt), scope, out);
    case StmtKind::kSet: {
      const auto& set = static_cast<const SetStmt&>(stmt);
      SS_ASSIGN_OR_RETURN(Value v, eval(*set.value, scope));
      SS_TRY(assign(set.target, std::move(v), scope, stmt.offset));
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock:
      return exec_set_block(static_cast<const SetBlockStmt&>(stmt), scope);
    case StmtKind::kMacro: {
      const auto& macro = static_cast<const MacroStmt&>(stmt);
      scope.set(macro.name, make_macro(macro));
      return Flow::kNormal;
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kFilterBlock:
      return exec_filter_block(static_cast<const FilterBlockStmt&>(stmt), scope, out);
    case StmtKind::kScope:
      return exec_scope(static_cast<const ScopeStmt&>(stmt), scope, out);
  }
  return Flow::kNormal;
}

Result<Interpreter::Flow> Interpreter::exec_if(const IfStmt& stmt, Scope& scope, MarkedText& out) {
  for (const auto& [condition, body] : stmt.branches) {
    SS_ASSIGN_OR_RETURN(Value v, eval(*condition, scope));
    if (v.truthy()) return exec_body(body, scope, out);
  }
  return exec_body(stmt.else_body, scope, out);
}

Value Interpreter::loop_object(const std::vector<Value>& items, size_t index) {
  const auto n = static_cast<int64_t>(items.size());
  const auto i = static_cast<int64_t>(index);
  DictData loop;
  auto put = [&loop](const char* name, Value v) {
    loop.entries.emplace_back(Value::string(name), std::move(v));
  };
  put("index", Value::integer(i + 1));
  put("index0", Value::integer(i));
  put("revindex", Value::integer(n - i));
  put("revindex0", Value::integer(n - i - 1));
  put("first", Value::boolean(i == 0));
  put("last", Value::boolean(i == n - 1));
  put("length", Value::integer(n));
  put("depth", Value::integer(1));
  put("depth0", Value::integer(0));
  if (i > 0) put("previtem", items[index - 1]);
  if (i + 1 < n) put("nextitem", items[index + 1]);
  put("cycle", Value::function("cycle", [i](const CallArgs& args) -> Result<Value> {
        if (args.positional.empty()) return make_error("no items for cycling given");
        return args.positional[static_cast<size_t>(i) % args.positional.size()];
      }));
  return Value::dict(std::move(loop));
}

Result<Interpreter::Flow> Interpreter::exec_for(const ForStmt& stmt, Scope& scope,
                                                MarkedText& out) {
  SS_ASSIGN_OR_RETURN(Value iterable, eval(*stmt.iterable, scope));
  auto listed = iterate(iterable);
  if (!listed.ok()) return at(stmt.iterable->offset, listed.message());
  std::vector<Value> items = std::move(listed).value();
  SS_TRY(charge(items.size(), stmt.offset));
  if (stmt.filter) {  // `for x in xs if cond`: loop.length counts kept items only
    std::vector<Value> kept;
    for (Value& item : items) {
      Scope probe(&scope);
      SS_TRY(assign(stmt.target, item, probe, stmt.offset));
      SS_ASSIGN_OR_RETURN(Value keep, eval(*stmt.filter, probe));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    SS_TRY(charge(1, stmt.offset));
    Scope iteration(&scope);
    SS_TRY(assign(stmt.target, items[i], iteration, stmt.offset));
    iteration.set("loop", loop_object(items, i));
    SS_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, iteration, out));
    if (flow == Flow::kBreak) break;
  }
  if (items.empty()) {
    Scope otherwise(&scope);
    SS_TRY(exec_body(stmt.else_body, otherwise, out));
  }
  return Flow::kNormal;
}

Status Interpreter::assign(const Target& target, Value value, Scope& scope, size_t offset) {
  if (!target.attr.empty()) {
    const Value* ns = scope.find(target.names[0]);
    if (ns == nullptr || !ns->is_namespace()) {
      return at(offset, "cannot assign attribute on non-namespace object");
    }
    if (contains_namespace(value)) return at(offset, "a namespace cannot hold a namespace");
    DictData& attrs = ns->as_namespace().attrs;
    for (auto& [key, v] : attrs.entries) {
      if (key.as_string() == target.attr) {
        v = std::move(value);
        return {};
      }
    }
    attrs.entries.emplace_back(Value::string(target.attr), std::move(value));
    return {};
  }
  if (!target.unpack) {
    scope.set(target.names[0], std::move(value));
    return {};
  }
  auto items = iterate(value);
  if (!items.ok()) return at(offset, "cannot unpack non-iterable " + value.type_name());
  if (items->size() != target.names.size()) {
    return at(offset, fmt::format("cannot unpack {} values into {} names", items->size(),
                                  target.names.size()));
  }
  for (size_t i = 0; i < items->size(); ++i) scope.set(target.names[i], (*items)[i]);
  return {};
}

Result<Interpreter::Flow> Interpreter::exec_set_block(const SetBlockStmt& stmt, Scope& scope) {
  MarkedText text;
  Scope inner(&scope);
  SS_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, inner, text));
  Value v = text.take();
  for (const auto& filter : stmt.filters) {
    SS_ASSIGN_OR_RETURN(v, apply_filter(*filter, v, scope));
  }
  SS_TRY(assign(stmt.target, std::move(v), scope, stmt.offset));
  return flow;
}

Result<Interpreter::Flow> Interpreter::exec_filter_block(const FilterBlockStmt& stmt, Scope& scope,
                                                         MarkedText& out) {
  MarkedText text;
  Scope inner(&scope);
  SS_ASSIGN_OR_RETURN(Flow flow, exec_body(stmt.body, inner, text));
  Value v = text.take();
  for (const auto& filter : stmt.filters) {
    SS_ASSIGN_OR_RETURN(v, apply_filter(*filter, v, scope));
  }
  SS_TRY(append(out, v, stmt.offset));
  return flow;
}

Result<Interpreter::Flow> Interpreter::exec_scope(const ScopeStmt& stmt, Scope& scope,
                                                  MarkedText& out) {
  Scope inner(&scope);
  for (const auto& [name, expr] : stmt.assignments) {
    SS_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
    inner.set(name, std::move(v));
  }
  return exec_body(stmt.body, inner, out);
}

Value Interpreter::make_macro(const MacroStmt& stmt) {
  return Value::function(
      stmt.name, [this, &stmt](const CallArgs& args) { return call_macro(stmt, args); }, true);
}

Result<Value> Interpreter::call_macro(const MacroStmt& stmt, const CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return at(stmt.offset,
              fmt::format("macro '{}' recursed deeper than {}", stmt.name, limits_.max_call_depth));
  }
  if (args.positional.size() > stmt.params.size()) {
    return at(stmt.offset, fmt::format("macro '{}' takes not more than {} argument(s)", stmt.name,
                                       stmt.params.size()));
  }
  Scope scope(top_);
  std::vector<bool> bound(stmt.params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope.set(stmt.params[i].first, args.positional[i]);
    bound[i] = true;
  }
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < stmt.params.size() && stmt.params[i].first != name) ++i;
    if (i == stmt.params.size() || bound[i]) {
      return at(stmt.offset, fmt::format("macro '{}' got an unexpected or repeated argument '{}'",
                                         stmt.name, name));
    }
    scope.set(name, value);
    bound[i] = true;
  }
  for (size_t i = 0; i < stmt.params.size(); ++i) {
    if (bound[i]) continue;
    const auto& [name, fallback] = stmt.params[i];
    if (fallback) {
      SS_ASSIGN_OR_RETURN(Value v, eval(*fallback, scope));
      scope.set(name, std::move(v));
    } else {
      scope.set(name, Value::undefined(fmt::format("parameter '{}' was not provided", name)));
    }
  }
  ++call_depth_;
  MarkedText out;
  auto flow = exec_body(stmt.body, scope, out);
  --call_depth_;
  if (!flow.ok()) return flow.error();
  return out.take();
}

Result<MarkedText> render_template(const Template& tmpl, const DictData& context,
                                   const RenderLimits& limits) {
  Scope globals(nullptr);
  for (auto& [name, fn] : global_functions()) globals.set(name, std::move(fn));
  for (const auto& [key, value] : context.entries) {
    if (key.is_string()) globals.set(key.as_string(), value);
  }
  Scope top(&globals);
  Interpreter interpreter(limits, &top);
  MarkedText out;
  SS_TRY(interpreter.exec_body(tmpl.body, top, out));
  return out;
}

}  // namespace specstack::jinja

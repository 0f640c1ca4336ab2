// OpenAI `tools`, `tool_choice` and `parallel_tool_calls` on chat requests:
// validated into native types, and the grammar that forces calls when the
// request demands one (tool_choice "required" or a named function).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/grammar_trigger.h"
#include "server/request_fields.h"
#include "server/tool_calls.h"

namespace specstack {

enum class ToolChoice {
  kToolChoiceNone,      // tools not offered, output not parsed
  kToolChoiceAuto,      // text or calls; a call, once opened, is constrained (lazily)
  kToolChoiceRequired,  // at least one call, constrained by grammar
  kToolChoiceNamed,     // exactly calls of `ToolRequest::named`, constrained
};

struct ToolFunction {
  std::string name;
  OrderedJson parameters;  // a JSON schema ({"type": "object"} when absent)
  bool strict = false;     // OpenAI's default: extra properties allowed
};

struct ToolRequest {
  std::vector<ToolFunction> functions;  // empty: the request has no tools
  ToolChoice choice = ToolChoice::kToolChoiceAuto;
  std::string named;     // kToolChoiceNamed: the function
  bool parallel = true;  // parallel_tool_calls: false means at most one call

  // Tools are offered to the model and its output is parsed for calls.
  bool active() const { return !functions.empty() && choice != ToolChoice::kToolChoiceNone; }
  // The output must be calls, so a grammar forces them.
  bool forced() const {
    return active() &&
           (choice == ToolChoice::kToolChoiceRequired || choice == ToolChoice::kToolChoiceNamed);
  }
};

// At most this many calls in one forced answer (parallel_tool_calls true).
inline constexpr int kMaxParallelToolCalls = 8;

// Errors are 400s; `error_param` names the field at fault ("tools",
// "tool_choice" or "parallel_tool_calls"). Each function's parameters
// schema is compiled once here, so a schema the grammar compiler refuses is
// a 400 whether or not the call would be constrained.
Result<ToolRequest> parse_tool_request(const OrderedJson& body, std::string& error_param);

// GBNF for a forced answer in `format`: one call (or, with parallel, up to
// kMaxParallelToolCalls in a row) of the allowed functions, each call's
// arguments matching that function's schema (strict or not, as declared).
// Llama's JSON format carries one call, so parallel is ignored there.
Result<std::string> tool_call_gbnf(const ToolRequest& request, ToolCallFormat format);

// tool_choice "auto": the grammar of one call and the trigger that starts
// it (grammar/grammar_trigger.h). Hermes: the trigger is "<tool_call>"
// anywhere in the output, the grammar one call block, and with parallel the
// trigger re-arms after each call. Llama 3.1 JSON: the trigger is a "{" as
// the output's first non-whitespace byte (the format's call is the whole
// output; <|python_tag|> calls, for built-in tools, stay unconstrained and
// are parsed leniently), one call.
struct LazyToolGrammar {
  std::string gbnf;
  grammar::GrammarTrigger trigger;
};
Result<LazyToolGrammar> tool_call_lazy_grammar(const ToolRequest& request, ToolCallFormat format);

}  // namespace specstack

// OpenAI `tools`, `tool_choice` and `parallel_tool_calls` on chat requests:
// validated into native types, and the grammar that forces calls when the
// request demands one (tool_choice "required" or a named function).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "server/request_fields.h"
#include "server/tool_calls.h"

namespace specstack {

enum class ToolChoice {
  kToolChoiceNone,      // tools not offered, output not parsed
  kToolChoiceAuto,      // text or calls; calls parsed leniently, not constrained
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

}  // namespace specstack

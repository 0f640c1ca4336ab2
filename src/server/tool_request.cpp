#include "server/tool_request.h"

#include <set>

#include "grammar/json_schema.h"

namespace specstack {
namespace {

// OpenAI's rule for function names.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  }
  return true;
}

// The schema of one call: {"name": const, <args key>: parameters}, keys in
// the order the template's instructions show them.
OrderedJson call_schema(const ToolFunction& function, ToolCallFormat format) {
  OrderedJson properties = OrderedJson::object();
  properties["name"] = OrderedJson{{"const", function.name}};
  const char* args_key = format == ToolCallFormat::kToolCallHermes ? "arguments" : "parameters";
  properties[args_key] = function.parameters;
  OrderedJson schema = OrderedJson::object();
  schema["type"] = "object";
  schema["properties"] = std::move(properties);
  schema["required"] = OrderedJson::array({"name", args_key});
  schema["additionalProperties"] = false;
  // The parameters' own $defs are resolved against the root the compiler
  // sees, so they move up to this wrapper.
  for (const char* section : {"$defs", "definitions"}) {
    if (function.parameters.contains(section)) schema[section] = function.parameters[section];
  }
  return schema;
}

Result<std::string> compile_call(const ToolFunction& function, ToolCallFormat format,
                                 const std::string& rule) {
  grammar::JsonSchemaOptions options;
  options.strict = function.strict;
  options.root_rule = rule;
  options.rule_prefix = rule + "-";
  options.with_primitives = false;
  return grammar::json_schema_to_gbnf(call_schema(function, format), options);
}

Result<ToolFunction> parse_tool(const OrderedJson& tool, size_t i) {
  if (!tool.is_object()) return errorf("'tools[{}]' must be an object", i);
  SS_ASSIGN_OR_RETURN(std::optional<std::string> type, get_string(tool, "type"));
  if (type.value_or("") != "function") {
    return errorf("'tools[{}].type' must be \"function\" (the only tool type supported)", i);
  }
  SS_ASSIGN_OR_RETURN(const OrderedJson* function, get_object(tool, "function"));
  if (function == nullptr) return errorf("'tools[{}].function' is required", i);
  ToolFunction out;
  SS_ASSIGN_OR_RETURN(std::optional<std::string> name, get_string(*function, "name"));
  if (!name || !valid_function_name(*name)) {
    return errorf("'tools[{}].function.name' must be 1-64 characters of a-z, A-Z, 0-9, _ and -", i);
  }
  out.name = *name;
  SS_ASSIGN_OR_RETURN(std::optional<std::string> description, get_string(*function, "description"));
  SS_ASSIGN_OR_RETURN(std::optional<bool> strict, get_bool(*function, "strict"));
  out.strict = strict.value_or(false);
  SS_ASSIGN_OR_RETURN(const OrderedJson* parameters, get_object(*function, "parameters"));
  out.parameters = parameters != nullptr ? *parameters : OrderedJson{{"type", "object"}};
  // Compile now, alone (so errors point into it): a schema the compiler
  // refuses is the request's error even when nothing forces a call.
  grammar::JsonSchemaOptions options;
  options.strict = out.strict;
  auto compiled = grammar::json_schema_to_gbnf(out.parameters, options);
  if (!compiled.ok()) {
    return errorf("Invalid 'tools[{}].function.parameters': {}", i, compiled.message());
  }
  return out;
}

Status parse_tool_choice(const OrderedJson& body, ToolRequest& request) {
  const auto found = body.find("tool_choice");
  if (found == body.end() || found->is_null()) {
    // OpenAI: "none" without tools, "auto" with them.
    request.choice = ToolChoice::kToolChoiceAuto;
    return Status::ok_status();
  }
  const OrderedJson& choice = *found;
  if (choice.is_string()) {
    const std::string& mode = choice.get_ref<const std::string&>();
    if (mode == "none")
      request.choice = ToolChoice::kToolChoiceNone;
    else if (mode == "auto")
      request.choice = ToolChoice::kToolChoiceAuto;
    else if (mode == "required")
      request.choice = ToolChoice::kToolChoiceRequired;
    else
      return errorf("'tool_choice' must be none, auto, required or a function, got '{}'", mode);
  } else if (choice.is_object()) {
    SS_ASSIGN_OR_RETURN(std::optional<std::string> type, get_string(choice, "type"));
    SS_ASSIGN_OR_RETURN(const OrderedJson* function, get_object(choice, "function"));
    std::optional<std::string> name;
    if (function != nullptr) {
      SS_ASSIGN_OR_RETURN(name, get_string(*function, "name"));
    }
    if (type.value_or("") != "function" || !name) {
      return make_error(
          "'tool_choice' as an object must be {\"type\": \"function\", \"function\": {\"name\": "
          "...}}");
    }
    request.choice = ToolChoice::kToolChoiceNamed;
    request.named = *name;
  } else {
    return errorf("'tool_choice' must be a string or an object, got {}", json_type_name(choice));
  }
  if (request.choice != ToolChoice::kToolChoiceNone && request.functions.empty()) {
    return make_error("'tool_choice' is only allowed when 'tools' are given");
  }
  if (request.choice == ToolChoice::kToolChoiceNamed) {
    bool known = false;
    for (const ToolFunction& f : request.functions) known = known || f.name == request.named;
    if (!known) {
      return errorf("'tool_choice' names the function '{}', which is not in 'tools'",
                    request.named);
    }
  }
  return Status::ok_status();
}

}  // namespace

Result<ToolRequest> parse_tool_request(const OrderedJson& body, std::string& error_param) {
  ToolRequest request;
  error_param = "tools";
  if (const auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      return errorf("'tools' must be an array, got {}", json_type_name(*tools));
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      SS_ASSIGN_OR_RETURN(ToolFunction function, parse_tool((*tools)[i], i));
      if (!names.insert(function.name).second) {
        return errorf("'tools[{}].function.name': '{}' is declared twice", i, function.name);
      }
      request.functions.push_back(std::move(function));
    }
  }
  error_param = "tool_choice";
  SS_TRY(parse_tool_choice(body, request));
  error_param = "parallel_tool_calls";
  SS_ASSIGN_OR_RETURN(std::optional<bool> parallel, get_bool(body, "parallel_tool_calls"));
  request.parallel = parallel.value_or(true);
  error_param.clear();
  return request;
}

namespace {

// The rules of every callable function and the alternation of their call
// rules ("tool-call-0 | tool-call-2").
struct CallRules {
  std::string rules;
  std::string alternatives;
};

Result<CallRules> call_rules(const ToolRequest& request, ToolCallFormat format) {
  CallRules out;
  for (size_t i = 0; i < request.functions.size(); ++i) {
    const ToolFunction& function = request.functions[i];
    if (request.choice == ToolChoice::kToolChoiceNamed && function.name != request.named) continue;
    const std::string rule = "tool-call-" + std::to_string(i);
    SS_ASSIGN_OR_RETURN(std::string compiled, compile_call(function, format, rule));
    out.rules += compiled;
    out.alternatives += (out.alternatives.empty() ? "" : " | ") + rule;
  }
  if (out.alternatives.empty()) return make_error("no function to call");
  return out;
}

constexpr std::string_view kCallBlock =
    "call-block ::= \"<tool_call>\\n\" ({}) \"\\n</tool_call>\"\n";

}  // namespace

Result<std::string> tool_call_gbnf(const ToolRequest& request, ToolCallFormat format) {
  SS_ASSIGN_OR_RETURN(CallRules calls, call_rules(request, format));
  std::string root;
  if (format == ToolCallFormat::kToolCallHermes) {
    root = "root ::= call-block";
    if (request.parallel) {
      root += fmt::format(" (\"\\n\" call-block){{0,{}}}", kMaxParallelToolCalls - 1);
    }
    root += "\n" + fmt::format(kCallBlock, calls.alternatives);
  } else {
    root = "root ::= " + calls.alternatives + "\n";
  }
  return root + calls.rules + grammar::json_schema_primitives_gbnf();
}

Result<LazyToolGrammar> tool_call_lazy_grammar(const ToolRequest& request, ToolCallFormat format) {
  SS_ASSIGN_OR_RETURN(CallRules calls, call_rules(request, format));
  LazyToolGrammar out;
  if (format == ToolCallFormat::kToolCallHermes) {
    // One call per activation; the trigger re-arms after it for the next.
    out.gbnf = "root ::= call-block\n" + fmt::format(kCallBlock, calls.alternatives);
    out.trigger = grammar::GrammarTrigger{"<tool_call>", /*at_start=*/false, request.parallel};
  } else {
    // The call is the whole output (one call), from its first "{".
    out.gbnf = "root ::= " + calls.alternatives + "\n";
    out.trigger = grammar::GrammarTrigger{"{", /*at_start=*/true, /*repeat=*/false};
  }
  out.gbnf += calls.rules + grammar::json_schema_primitives_gbnf();
  return out;
}

}  // namespace specstack

// JSON in and out of the interpreter: the render context arrives as
// nlohmann::json, and the tojson filter must print exactly what Python's
// json.dumps prints (transformers overrides jinja2's tojson with it).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

// json.dumps keyword arguments; the defaults are transformers' tojson defaults.
struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_separator = ", ";  // json.dumps uses "," when indent is set
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

// Whether the strings (values and object keys) of converted JSON are user text.
enum class JsonStrings { kTemplateText, kUserText };

// Errors on nesting deeper than max_depth (the context is untrusted input).
// Object keys keep their order, as in the Python dicts transformers renders.
Result<Value> value_from_json(const nlohmann::ordered_json& json, uint32_t max_depth,
                              JsonStrings strings = JsonStrings::kTemplateText);
// json.dumps(value, ...); undefined, namespaces and functions are not serializable.
Result<std::string> dump_json(const Value& value, const JsonDumpOptions& options);

}  // namespace specstack::jinja

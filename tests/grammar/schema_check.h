// A small JSON-schema validator (strict: additionalProperties false unless
// given, as OpenAI strict mode; non-strict: JSON schema's default, true) for the subset
// grammar/json_schema.h compiles, written independently of the compiler (it reads the schema, not
// the grammar), so tests can check generated documents against the schema.
#pragma once

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace specstack::testing {

inline size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// True when `doc` validates; otherwise false with the reason in *why.
inline bool schema_valid(const nlohmann::ordered_json& doc, const nlohmann::ordered_json& schema,
                         const nlohmann::ordered_json& root, std::string* why, int depth = 0,
                         bool strict = true) {
  using Json = nlohmann::ordered_json;
  auto no = [&](const std::string& reason) {
    if (why) *why = reason + " in " + doc.dump();
    return false;
  };
  if (depth > 64) return no("too deep");
  if (schema.is_boolean()) return schema.get<bool>() || no("false schema");
  if (schema.contains("$ref")) {
    const std::string ref = schema["$ref"];
    if (ref == "#") return schema_valid(doc, root, root, why, depth + 1, strict);
    const auto slash = ref.rfind('/');
    const std::string section = ref.substr(2, slash - 2);
    return schema_valid(doc, root[section][ref.substr(slash + 1)], root, why, depth + 1, strict);
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    int n = 0;
    for (const Json& alt : schema[key])
      n += schema_valid(doc, alt, root, nullptr, depth + 1, strict);
    if (n == 0) return no(std::string("no ") + key + " branch matches");
    if (n > 1 && std::string(key) == "oneOf") return no("more than one oneOf branch matches");
    return true;
  }
  if (schema.contains("const") && doc != schema["const"]) return no("not the const");
  if (schema.contains("enum")) {
    bool found = false;
    for (const Json& v : schema["enum"]) found = found || v == doc;
    if (!found) return no("not in the enum");
  }
  std::vector<std::string> types;
  if (schema.contains("type")) {
    if (schema["type"].is_array()) {
      for (const Json& t : schema["type"]) types.push_back(t);
    } else {
      types.push_back(schema["type"]);
    }
  } else if (schema.contains("properties")) {
    types.push_back("object");
  }
  if (!types.empty()) {
    bool ok = false;
    for (const std::string& t : types) {
      ok = ok || (t == "object" && doc.is_object()) || (t == "array" && doc.is_array()) ||
           (t == "string" && doc.is_string()) || (t == "number" && doc.is_number()) ||
           (t == "integer" &&
            (doc.is_number_integer() ||
             (doc.is_number_float() && doc.get<double>() == std::floor(doc.get<double>())))) ||
           (t == "boolean" && doc.is_boolean()) || (t == "null" && doc.is_null());
    }
    if (!ok) return no("wrong type");
  }
  if (doc.is_object() &&
      (schema.contains("properties") || schema.contains("additionalProperties"))) {
    const Json props = schema.value("properties", Json::object());
    for (const auto& [key, value] : doc.items()) {
      if (props.contains(key)) {
        if (!schema_valid(value, props[key], root, why, depth + 1, strict)) return false;
      } else if ((strict && !schema.contains("additionalProperties")) ||
                 schema.value("additionalProperties", Json(true)) == false) {
        return no("additional property " + key);
      } else if (!schema_valid(value, schema["additionalProperties"], root, why, depth + 1,
                               strict)) {
        return false;
      }
    }
    for (const Json& r : schema.value("required", Json::array())) {
      if (!doc.contains(r.get<std::string>())) return no("missing " + r.get<std::string>());
    }
  }
  if (doc.is_number()) {
    const double v = doc.get<double>();
    if (schema.contains("minimum") && v < schema["minimum"].get<double>()) return no("< minimum");
    if (schema.contains("maximum") && v > schema["maximum"].get<double>()) return no("> maximum");
    if (schema.contains("exclusiveMinimum") && v <= schema["exclusiveMinimum"].get<double>())
      return no("<= exclusiveMinimum");
    if (schema.contains("exclusiveMaximum") && v >= schema["exclusiveMaximum"].get<double>())
      return no(">= exclusiveMaximum");
  }
  if (doc.is_array()) {
    if (schema.contains("minItems") && doc.size() < schema["minItems"].get<size_t>())
      return no("too few items");
    if (schema.contains("maxItems") && doc.size() > schema["maxItems"].get<size_t>())
      return no("too many items");
    if (schema.contains("items")) {
      for (const Json& item : doc) {
        if (!schema_valid(item, schema["items"], root, why, depth + 1, strict)) return false;
      }
    }
  }
  if (doc.is_string()) {
    const std::string s = doc;
    if (schema.contains("minLength") && utf8_length(s) < schema["minLength"].get<size_t>())
      return no("too short");
    if (schema.contains("maxLength") && utf8_length(s) > schema["maxLength"].get<size_t>())
      return no("too long");
    if (schema.contains("pattern") &&
        !std::regex_search(s, std::regex(schema["pattern"].get<std::string>())))
      return no("pattern mismatch");
    static const std::map<std::string, std::string> formats = {
        {"date", R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$)"},
        {"uuid", R"(^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$)"},
        {"date-time",
         R"(^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)"}};
    if (schema.contains("format") && formats.count(schema["format"]) &&
        !std::regex_search(s, std::regex(formats.at(schema["format"]))))
      return no("format mismatch");
  }
  return true;
}

}  // namespace specstack::testing

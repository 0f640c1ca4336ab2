#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "grammar/schema_pattern.h"

namespace specstack::grammar {

namespace {

using Json = nlohmann::ordered_json;

// The primitives every schema grammar shares (llama.cpp's definitions).
constexpr const char* kPrimitives = R"(ws ::= ("" | " " | "\n" [ \t]{0,20})
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\"" ws
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part ::= [0-9]{1,16}
number ::= "-"? integral-part ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})? ws
integer ::= "-"? integral-part ws
boolean ::= ("true" | "false") ws
null ::= "null" ws
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws
array ::= "[" ws (value ("," ws value)*)? "]" ws
date ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])
time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
hex ::= [0-9a-fA-F]
uuid ::= hex{8} "-" hex{4} "-" hex{4} "-" hex{4} "-" hex{12}
)";

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "default",    "examples", "$schema",
    "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};

// A GBNF string literal of `text`.
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += fmt::format("\\x{:02X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const Json& root) : root_(root) {}

  Result<std::string> compile() {
    auto root = visit(root_, "root-value", "#");
    if (!root.ok()) return root.error();
    std::string out = "root ::= " + *root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + kPrimitives;
  }

 private:
  std::string new_rule(const std::string& hint, std::string body) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    std::string name = "s-" + base;
    for (int i = 2; rules_.count(name) != 0 || reserved_.count(name) != 0; ++i) {
      name = fmt::format("s-{}-{}", base, i);
    }
    rules_[name] = std::move(body);
    return name;
  }

  static Error unsupported(const std::string& pointer, std::string_view keyword,
                           std::string_view why = "is not supported") {
    return errorf("JSON schema keyword '{}' at '{}' {}", keyword, pointer, why);
  }

  // An expression (a rule name or a parenthesized alternation) matching the
  // JSON text of `schema`, followed by ws.
  Result<std::string> visit(const Json& schema, const std::string& hint,
                            const std::string& pointer) {
    if (++depth_ > 64) return errorf("JSON schema nested too deeply at '{}'", pointer);
    auto out = visit_inner(schema, hint, pointer);
    --depth_;
    return out;
  }

  Result<std::string> visit_inner(const Json& schema, const std::string& hint,
                                  const std::string& pointer) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::string("value");
      return errorf("JSON schema 'false' at '{}' matches nothing", pointer);
    }
    if (!schema.is_object()) return errorf("JSON schema at '{}' must be an object", pointer);
    for (const auto& [key, unused] : schema.items()) {
      if (kAnnotations.count(key) != 0 || known_.count(key) != 0) continue;
      return unsupported(pointer, key);
    }
    if (schema.contains("$ref")) return visit_ref(schema, pointer);
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const Json& list = schema[key];
      if (!list.is_array() || list.empty()) {
        return errorf("JSON schema '{}' at '{}' must be a non-empty array", key, pointer);
      }
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) {
        auto alt = visit(list[i], hint, fmt::format("{}/{}/{}", pointer, key, i));
        if (!alt.ok()) return alt;
        alts += (i ? " | " : "") + *alt;
      }
      return "(" + alts + ")";
    }
    if (schema.contains("const")) return literal(schema["const"].dump()) + " ws";
    if (schema.contains("enum")) {
      const Json& list = schema["enum"];
      if (!list.is_array() || list.empty()) {
        return errorf("JSON schema 'enum' at '{}' must be a non-empty array", pointer);
      }
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) alts += (i ? " | " : "") + literal(list[i].dump());
      return "(" + alts + ") ws";
    }
    if (!schema.contains("type")) {
      if (schema.contains("properties")) return visit_object(schema, hint, pointer);
      if (schema.contains("items")) return visit_array(schema, hint, pointer);
      return std::string("value");
    }
    const Json& type = schema["type"];
    if (type.is_array()) {
      std::string alts;
      for (size_t i = 0; i < type.size(); ++i) {
        if (!type[i].is_string())
          return errorf("JSON schema 'type' at '{}' must name types", pointer);
        auto alt = visit_type(type[i].get<std::string>(), schema, hint, pointer);
        if (!alt.ok()) return alt;
        alts += (i ? " | " : "") + *alt;
      }
      if (alts.empty()) return errorf("JSON schema 'type' at '{}' is an empty list", pointer);
      return "(" + alts + ")";
    }
    if (!type.is_string()) return errorf("JSON schema 'type' at '{}' must be a string", pointer);
    return visit_type(type.get<std::string>(), schema, hint, pointer);
  }

  Result<std::string> visit_type(const std::string& type, const Json& schema,
                                 const std::string& hint, const std::string& pointer) {
    if (type == "object") return visit_object(schema, hint, pointer);
    if (type == "array") return visit_array(schema, hint, pointer);
    if (type == "string") return visit_string(schema, hint, pointer);
    if (type == "number" || type == "integer" || type == "boolean" || type == "null") {
      for (const char* key :
           {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
        if (schema.contains(key)) return unsupported(pointer, key);
      }
      return type;
    }
    return errorf("JSON schema 'type' at '{}': unknown type '{}'", pointer, type);
  }

  Result<std::string> visit_ref(const Json& schema, const std::string& pointer) {
    const Json& ref = schema["$ref"];
    if (!ref.is_string()) return errorf("JSON schema '$ref' at '{}' must be a string", pointer);
    const std::string target = ref.get<std::string>();
    std::string name;
    const Json* defs = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) == 0) {
        name = target.substr(p.size());
        const std::string section = p.substr(2, p.size() - 3);
        if (root_.contains(section)) defs = &root_[section];
      }
    }
    if (target == "#") return ref_rule(target, root_, "root");
    if (name.empty()) {
      return unsupported(pointer, "$ref",
                         fmt::format("'{}' (only #, #/$defs/NAME and "
                                     "#/definitions/NAME are supported)",
                                     target));
    }
    if (defs == nullptr || !defs->is_object() || !defs->contains(name)) {
      return errorf("JSON schema '$ref' at '{}': '{}' is not defined", pointer, target);
    }
    return ref_rule(target, (*defs)[name], name);
  }

  // A named rule per reference target, created before its body is visited,
  // so a recursive definition refers to itself by name.
  Result<std::string> ref_rule(const std::string& target, const Json& schema,
                               const std::string& hint) {
    if (auto it = ref_rules_.find(target); it != ref_rules_.end()) return it->second;
    const std::string name = new_rule("def-" + hint, "");
    ref_rules_[target] = name;
    auto body = visit(schema, hint, target);
    if (!body.ok()) return body;
    rules_[name] = *body;
    return name;
  }

  Result<std::string> visit_object(const Json& schema, const std::string& hint,
                                   const std::string& pointer) {
    for (const char* key : {"minProperties", "maxProperties", "patternProperties", "propertyNames",
                            "dependentRequired", "dependentSchemas"}) {
      if (schema.contains(key)) return unsupported(pointer, key);
    }
    // No properties and no additionalProperties: any object (strict mode's
    // default would leave only {}, which nobody asking for an object means).
    if (!schema.contains("properties") && !schema.contains("additionalProperties")) {
      return std::string("object");
    }
    std::vector<std::pair<std::string, std::string>> props;  // key literal part, value expr
    std::vector<bool> required;
    std::set<std::string> required_names;
    if (schema.contains("required")) {
      if (!schema["required"].is_array()) {
        return errorf("JSON schema 'required' at '{}' must be an array", pointer);
      }
      for (const Json& r : schema["required"]) {
        if (!r.is_string())
          return errorf("JSON schema 'required' at '{}' must list names", pointer);
        required_names.insert(r.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      const Json& p = schema["properties"];
      if (!p.is_object())
        return errorf("JSON schema 'properties' at '{}' must be an object", pointer);
      for (const auto& [key, sub] : p.items()) {
        auto value = visit(sub, hint + "-" + key, pointer + "/properties/" + key);
        if (!value.ok()) return value;
        props.emplace_back(literal(Json(key).dump()) + " ws \":\" ws " + *value, key);
        required.push_back(required_names.count(key) != 0);
      }
    }
    for (const std::string& r : required_names) {
      bool found = false;
      for (const auto& [unused, key] : props) found = found || key == r;
      if (!found) {
        return errorf("JSON schema 'required' at '{}' names '{}', which is not in properties",
                      pointer, r);
      }
    }
    std::string extra;  // one additional key-value pair, or empty when not allowed
    if (schema.contains("additionalProperties")) {
      const Json& a = schema["additionalProperties"];
      if (a.is_boolean()) {
        if (a.get<bool>()) extra = "string \":\" ws value";
      } else {
        auto value = visit(a, hint + "-additional", pointer + "/additionalProperties");
        if (!value.ok()) return value;
        extra = "string \":\" ws " + *value;
      }
    }
    // S_i: properties i.. when none was written yet; T_i: after at least one
    // (so the next needs a comma). Optional properties may be skipped.
    const size_t n = props.size();
    std::vector<std::string> s(n + 1), t(n + 1);
    if (extra.empty()) {
      s[n] = "\"\"";
      t[n] = "\"\"";
    } else {
      const std::string more = new_rule(hint + "-more", "(\",\" ws " + extra + ")*");
      t[n] = more;
      s[n] = "(" + extra + " " + more + ")?";
    }
    for (size_t i = n; i-- > 0;) {
      const std::string& kv = props[i].first;
      const std::string t_body =
          "\",\" ws " + kv + " " + t[i + 1] + (required[i] ? "" : " | " + t[i + 1]);
      t[i] = new_rule(hint + "-after-" + props[i].second, t_body);
      const std::string s_body = kv + " " + t[i + 1] + (required[i] ? "" : " | " + s[i + 1]);
      s[i] = new_rule(hint + "-from-" + props[i].second, s_body);
    }
    return new_rule(hint, "\"{\" ws " + s[0] + " \"}\" ws");
  }

  Result<std::string> visit_array(const Json& schema, const std::string& hint,
                                  const std::string& pointer) {
    for (const char* key : {"prefixItems", "contains", "uniqueItems", "minContains", "maxContains",
                            "unevaluatedItems"}) {
      if (schema.contains(key)) return unsupported(pointer, key);
    }
    std::string item = "value";
    if (schema.contains("items")) {
      auto v = visit(schema["items"], hint + "-item", pointer + "/items");
      if (!v.ok()) return v;
      item = *v;
    }
    auto count = [&](const char* key, int64_t fallback) -> Result<int64_t> {
      if (!schema.contains(key)) return fallback;
      const Json& v = schema[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000) {
        return errorf("JSON schema '{}' at '{}' must be an integer in [0, 1000]", key, pointer);
      }
      return v.get<int64_t>();
    };
    auto min = count("minItems", 0);
    if (!min.ok()) return min.error();
    auto max = count("maxItems", -1);
    if (!max.ok()) return max.error();
    if (*max >= 0 && *max < *min) {
      return errorf("JSON schema at '{}': maxItems is below minItems", pointer);
    }
    const std::string item_rule = new_rule(hint + "-item", item);
    std::string body = "\"[\" ws ";
    if (*max == 0) {
      body += "\"]\" ws";
      return new_rule(hint, body);
    }
    const std::string rest_min = std::to_string(std::max<int64_t>(*min - 1, 0));
    const std::string rest_max = *max < 0 ? "" : std::to_string(*max - 1);
    const std::string list =
        item_rule + " (\",\" ws " + item_rule + "){" + rest_min + "," + rest_max + "}";
    body += (*min == 0 ? "(" + list + ")?" : list) + " \"]\" ws";
    return new_rule(hint, body);
  }

  Result<std::string> visit_string(const Json& schema, const std::string& hint,
                                   const std::string& pointer) {
    if (schema.contains("format")) {
      const Json& f = schema["format"];
      const std::string format = f.is_string() ? f.get<std::string>() : "";
      if (format == "date" || format == "time" || format == "uuid") {
        return "\"\\\"\" " + format + " \"\\\"\" ws";
      }
      if (format == "date-time") return std::string("\"\\\"\" date \"T\" time \"\\\"\" ws");
      return unsupported(
          pointer, "format",
          fmt::format("'{}' is not supported (date, time, date-time, uuid are)", f.dump()));
    }
    if (schema.contains("pattern")) {
      if (!schema["pattern"].is_string()) {
        return errorf("JSON schema 'pattern' at '{}' must be a string", pointer);
      }
      auto expr = pattern_to_gbnf(schema["pattern"].get<std::string>());
      if (!expr.ok()) return errorf("JSON schema 'pattern' at '{}': {}", pointer, expr.message());
      return new_rule(hint, "\"\\\"\" " + *expr + " \"\\\"\" ws");
    }
    int64_t min = 0, max = -1;
    for (const char* key : {"minLength", "maxLength"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 1000) {
        return errorf("JSON schema '{}' at '{}' must be an integer in [0, 1000]", key, pointer);
      }
      (std::string(key) == "minLength" ? min : max) = v.get<int64_t>();
    }
    if (max >= 0 && max < min)
      return errorf("JSON schema at '{}': maxLength is below minLength", pointer);
    if (min == 0 && max < 0) return std::string("string");
    return fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\" ws", min,
                       max < 0 ? "" : std::to_string(max));
  }

  const Json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  const std::set<std::string> reserved_ = {
      "root",   "ws",      "char",    "string", "integral-part", "decimal-part",
      "number", "integer", "boolean", "null",   "value",         "object",
      "array",  "date",    "time",    "hex",    "uuid"};
  const std::set<std::string, std::less<>> known_ = {
      "type",     "properties",  "required",  "additionalProperties",
      "enum",     "const",       "items",     "minItems",
      "maxItems", "minLength",   "maxLength", "format",
      "pattern",  "anyOf",       "oneOf",     "$ref",
      "$defs",    "definitions", "strict"};
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return SchemaCompiler(schema).compile();
}

std::string json_object_gbnf() {
  return std::string("root ::= object\n") + kPrimitives;
}

}  // namespace specstack::grammar

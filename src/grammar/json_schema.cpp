#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "grammar/integer_range.h"
#include "grammar/number_range.h"
#include "grammar/schema_disjoint.h"
#include "grammar/schema_pattern.h"

namespace specstack::grammar {

namespace {

using Json = nlohmann::ordered_json;

// The primitives every schema grammar shares (llama.cpp's definitions).
// Values end at their last byte: whitespace belongs to the containers (after
// a key, a value, an opening bracket), so nothing may follow the root value.
constexpr const char* kPrimitives = R"(ws ::= ("" | " " | "\n" [ \t]{0,20})
char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
string ::= "\"" char* "\""
integral-part ::= [0] | [1-9] [0-9]{0,15}
decimal-part ::= [0-9]{1,16}
number ::= "-"? integral-part ("." decimal-part)? ([eE] [-+]? [0-9]{1,2})?
integer ::= "-"? integral-part
boolean ::= ("true" | "false")
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ws ":" ws value ws ("," ws string ws ":" ws value ws)*)? "}"
array ::= "[" ws (value ws ("," ws value ws)*)? "]"
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
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options) {}

  Result<std::string> compile() {
    auto root = visit(root_, "root-value", "#");
    if (!root.ok()) return root.error();
    std::string out = options_.root_rule + " ::= " + *root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return options_.with_primitives ? out + kPrimitives : out;
  }

 private:
  std::string new_rule(const std::string& hint, std::string body) {
    std::string base;
    for (char c : hint) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    std::string name = options_.rule_prefix + base;
    for (int i = 2; rules_.count(name) != 0 || reserved_.count(name) != 0; ++i) {
      name = fmt::format("{}{}-{}", options_.rule_prefix, base, i);
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
      if (std::string_view(key) == "oneOf") SS_TRY(check_one_of(list, pointer));
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) {
        auto alt = visit(list[i], hint, fmt::format("{}/{}/{}", pointer, key, i));
        if (!alt.ok()) return alt;
        alts += (i ? " | " : "") + *alt;
      }
      return "(" + alts + ")";
    }
    if (schema.contains("const")) return literal(schema["const"].dump());
    if (schema.contains("enum")) {
      const Json& list = schema["enum"];
      if (!list.is_array() || list.empty()) {
        return errorf("JSON schema 'enum' at '{}' must be a non-empty array", pointer);
      }
      std::string alts;
      for (size_t i = 0; i < list.size(); ++i) alts += (i ? " | " : "") + literal(list[i].dump());
      return "(" + alts + ")";
    }
    if (!schema.contains("type")) {
      for (const char* key :
           {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
        if (schema.contains(key))
          return unsupported(pointer, key, "needs \"type\": \"integer\" or \"number\"");
      }
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
    if (type == "integer") return visit_integer(schema, pointer);
    if (type == "number") return visit_number(schema, pointer);
    if (type == "boolean" || type == "null") {
      for (const char* key :
           {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}) {
        if (schema.contains(key)) return unsupported(pointer, key);
      }
      return type;
    }
    return errorf("JSON schema 'type' at '{}': unknown type '{}'", pointer, type);
  }

  // oneOf compiles as alternation, which is exact only when no document can
  // match two branches; otherwise the request is refused (anyOf says what
  // the grammar can promise).
  Status check_one_of(const Json& list, const std::string& pointer) const {
    for (size_t i = 0; i < list.size(); ++i) {
      for (size_t j = i + 1; j < list.size(); ++j) {
        if (schemas_disjoint(list[i], list[j], root_)) continue;
        return errorf(
            "JSON schema 'oneOf' at '{}': branches {} and {} may both match a document, and "
            "exactly-one cannot be enforced; oneOf is supported when its branches differ in "
            "type, in const/enum values or in a required property's const/enum values (use "
            "anyOf otherwise)",
            pointer, i, j);
      }
    }
    return Status::ok_status();
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum (draft 6+
  // numbers) compile into the digits themselves (grammar/integer_range.h).
  Result<std::string> visit_integer(const Json& schema, const std::string& pointer) {
    if (schema.contains("multipleOf")) return unsupported(pointer, "multipleOf");
    std::optional<int64_t> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number() || std::abs(v.get<double>()) > double(kMaxJsonInteger)) {
        return errorf("JSON schema '{}' at '{}' must be a number within +-{}", key, pointer,
                      kMaxJsonInteger);
      }
      const double d = v.get<double>();
      const std::string_view name = key;
      if (name == "minimum" || name == "exclusiveMinimum") {
        // The smallest integer allowed: ceil(d), or the next one when exclusive.
        const double c = std::ceil(d);
        const int64_t bound = int64_t(c) + (name == "exclusiveMinimum" && c == d ? 1 : 0);
        lo = lo ? std::max(*lo, bound) : bound;
      } else {
        const double f = std::floor(d);
        const int64_t bound = int64_t(f) - (name == "exclusiveMaximum" && f == d ? 1 : 0);
        hi = hi ? std::min(*hi, bound) : bound;
      }
    }
    if (!lo && !hi) return std::string("integer");
    if (std::max(lo.value_or(-kMaxJsonInteger), -kMaxJsonInteger) >
        std::min(hi.value_or(kMaxJsonInteger), kMaxJsonInteger)) {
      return errorf("JSON schema at '{}': the integer bounds admit no value", pointer);
    }
    return integer_range_gbnf(lo, hi);
  }

  // Bounds on numbers: whole-number bounds compile into the digits
  // (grammar/number_range.h; a bounded number has no exponent); fractional
  // bounds and multipleOf are refused.
  Result<std::string> visit_number(const Json& schema, const std::string& pointer) {
    if (schema.contains("multipleOf")) return unsupported(pointer, "multipleOf");
    std::optional<NumberBound> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const Json& v = schema[key];
      if (!v.is_number() || std::abs(v.get<double>()) > double(kMaxJsonInteger)) {
        return errorf("JSON schema '{}' at '{}' must be a number within +-{}", key, pointer,
                      kMaxJsonInteger);
      }
      const double d = v.get<double>();
      if (d != std::floor(d)) {
        return errorf(
            "JSON schema '{}' at '{}': bounds on numbers must be whole numbers (got {}); "
            "fractional bounds are not supported",
            key, pointer, v.dump());
      }
      const std::string_view name = key;
      const NumberBound bound{int64_t(d), name.rfind("exclusive", 0) == 0};
      // The tighter of two bounds on one side (exclusive wins a tie).
      auto tighter = [](const NumberBound& a, const NumberBound& b, bool low) {
        if (a.value != b.value) return (low ? a.value > b.value : a.value < b.value) ? a : b;
        return a.exclusive ? a : b;
      };
      if (name == "minimum" || name == "exclusiveMinimum") {
        lo = lo ? tighter(*lo, bound, true) : bound;
      } else {
        hi = hi ? tighter(*hi, bound, false) : bound;
      }
    }
    if (!lo && !hi) return std::string("number");
    std::string range = number_range_gbnf(lo, hi);
    if (range.empty())
      return errorf("JSON schema at '{}': the number bounds admit no value", pointer);
    return range;
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
        props.emplace_back(literal(Json(key).dump()) + " ws \":\" ws " + *value + " ws", key);
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
    std::vector<std::string> names;
    for (const auto& [unused, key] : props) names.push_back(key);
    // Non-strict (OpenAI's strict: false) follows JSON schema's own default:
    // extra keys are allowed unless the schema says otherwise.
    if (!options_.strict && !schema.contains("additionalProperties")) {
      extra = extra_key(names, hint) + " ws \":\" ws value ws";
    }
    if (schema.contains("additionalProperties")) {
      const Json& a = schema["additionalProperties"];
      if (a.is_boolean()) {
        if (a.get<bool>()) extra = extra_key(names, hint) + " ws \":\" ws value ws";
      } else {
        auto value = visit(a, hint + "-additional", pointer + "/additionalProperties");
        if (!value.ok()) return value;
        extra = extra_key(names, hint) + " ws \":\" ws " + *value + " ws";
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
    return new_rule(hint, "\"{\" ws " + s[0] + " \"}\"");
  }

  // The key of an additional property: any string but a declared name (a
  // declared property must match its own schema, not the extras'). A trie
  // over the names: at each node the key may go on into a child, leave the
  // trie with any other character, or close where no name ends. Escapes are
  // not allowed in extra keys, so "\u0061" cannot spell a declared "a".
  std::string extra_key(const std::vector<std::string>& names, const std::string& hint) {
    // The trie steps bytes and the class below is over code points, which
    // agree for printable ASCII only; other names keep the plain string (an
    // extra key may then repeat such a name).
    bool ascii = true;
    for (const std::string& name : names) {
      for (unsigned char c : name) ascii = ascii && c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
    }
    if (names.empty() || !ascii) return "string";
    const std::string free = new_rule(hint + "-key-free", "[^\"\\\\\\x7F\\x00-\\x1F]* \"\\\"\"");
    std::function<std::string(const std::string&)> node = [&](const std::string& prefix) {
      std::map<unsigned char, bool> next;  // child byte -> a name continues through it
      bool ends = false;
      for (const std::string& name : names) {
        if (name.compare(0, prefix.size(), prefix) != 0) continue;
        if (name.size() == prefix.size())
          ends = true;
        else
          next[static_cast<unsigned char>(name[prefix.size()])] = true;
      }
      std::string alts, excluded;
      for (const auto& [c, unused] : next) {
        alts += (alts.empty() ? "" : " | ") + literal(std::string(1, char(c))) + " " +
                node(prefix + char(c));
        excluded += fmt::format("\\x{:02X}", c);
      }
      alts += std::string(alts.empty() ? "" : " | ") + "[^\"\\\\\\x7F\\x00-\\x1F" + excluded +
              "] " + free;
      if (!ends) alts += " | \"\\\"\"";
      return new_rule(hint + "-key", alts);
    };
    return "\"\\\"\" " + node("");
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
      body += "\"]\"";
      return new_rule(hint, body);
    }
    const std::string rest_min = std::to_string(std::max<int64_t>(*min - 1, 0));
    const std::string rest_max = *max < 0 ? "" : std::to_string(*max - 1);
    const std::string list =
        item_rule + " ws (\",\" ws " + item_rule + " ws){" + rest_min + "," + rest_max + "}";
    body += (*min == 0 ? "(" + list + ")?" : list) + " \"]\"";
    return new_rule(hint, body);
  }

  Result<std::string> visit_string(const Json& schema, const std::string& hint,
                                   const std::string& pointer) {
    if (schema.contains("format")) {
      const Json& f = schema["format"];
      const std::string format = f.is_string() ? f.get<std::string>() : "";
      if (format == "date" || format == "time" || format == "uuid") {
        return "\"\\\"\" " + format + " \"\\\"\"";
      }
      if (format == "date-time") return std::string("\"\\\"\" date \"T\" time \"\\\"\"");
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
      return new_rule(hint, "\"\\\"\" " + *expr + " \"\\\"\"");
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
    return fmt::format("\"\\\"\" char{{{},{}}} \"\\\"\"", min, max < 0 ? "" : std::to_string(max));
  }

  const Json& root_;
  const JsonSchemaOptions& options_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  const std::set<std::string> reserved_ = {
      "root",   "ws",      "char",    "string", "integral-part", "decimal-part",
      "number", "integer", "boolean", "null",   "value",         "object",
      "array",  "date",    "time",    "hex",    "uuid"};
  const std::set<std::string, std::less<>> known_ = {"type",
                                                     "properties",
                                                     "required",
                                                     "additionalProperties",
                                                     "enum",
                                                     "const",
                                                     "items",
                                                     "minItems",
                                                     "maxItems",
                                                     "minLength",
                                                     "maxLength",
                                                     "format",
                                                     "pattern",
                                                     "anyOf",
                                                     "oneOf",
                                                     "$ref",
                                                     "$defs",
                                                     "definitions",
                                                     "strict",
                                                     "minimum",
                                                     "maximum",
                                                     "exclusiveMinimum",
                                                     "exclusiveMaximum",
                                                     "multipleOf"};
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                        const JsonSchemaOptions& options) {
  return SchemaCompiler(schema, options).compile();
}

std::string json_schema_primitives_gbnf() {
  return kPrimitives;
}

std::string json_object_gbnf() {
  return std::string("root ::= object\n") + kPrimitives;
}

}  // namespace specstack::grammar

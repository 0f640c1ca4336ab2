#include "grammar/schema_disjoint.h"

#include <set>
#include <string>
#include <vector>

namespace specstack::grammar {
namespace {

using Json = nlohmann::ordered_json;

const std::set<std::string> kAllTypes = {"object",  "array",   "string", "number",
                                         "integer", "boolean", "null"};

// The schema a local $ref points at, or the schema itself (one hop: enough
// for the shapes below, and it cannot loop).
const Json& resolve(const Json& schema, const Json& root) {
  if (!schema.is_object() || !schema.contains("$ref") || !schema["$ref"].is_string()) {
    return schema;
  }
  const std::string ref = schema["$ref"].get<std::string>();
  if (ref == "#") return root;
  for (const std::string prefix : {"#/$defs/", "#/definitions/"}) {
    if (ref.rfind(prefix, 0) != 0) continue;
    const std::string section = prefix.substr(2, prefix.size() - 3);
    const std::string name = ref.substr(prefix.size());
    if (root.contains(section) && root[section].is_object() && root[section].contains(name)) {
      return root[section][name];
    }
  }
  return schema;
}

std::string json_type_of(const Json& value) {
  if (value.is_object()) return "object";
  if (value.is_array()) return "array";
  if (value.is_string()) return "string";
  if (value.is_number_integer()) return "integer";
  if (value.is_number()) return "number";
  if (value.is_boolean()) return "boolean";
  return "null";
}

// The values a schema admits when it lists them (const / enum), else none.
const Json* listed_values(const Json& schema, Json& storage) {
  if (!schema.is_object()) return nullptr;
  if (schema.contains("const")) {
    storage = Json::array({schema["const"]});
    return &storage;
  }
  if (schema.contains("enum") && schema["enum"].is_array()) return &schema["enum"];
  return nullptr;
}

// The JSON types a schema may match ("integer" stands for integral numbers,
// so "number" and "integer" overlap).
std::set<std::string> types_of(const Json& schema) {
  if (!schema.is_object()) return kAllTypes;
  Json storage;
  if (const Json* values = listed_values(schema, storage)) {
    std::set<std::string> out;
    for (const Json& v : *values) out.insert(json_type_of(v));
    return out;
  }
  if (!schema.contains("type")) {
    if (schema.contains("properties")) return {"object"};
    if (schema.contains("items")) return {"array"};
    return kAllTypes;
  }
  std::set<std::string> out;
  const Json& type = schema["type"];
  if (type.is_string()) out.insert(type.get<std::string>());
  if (type.is_array()) {
    for (const Json& t : type) {
      if (t.is_string()) out.insert(t.get<std::string>());
    }
  }
  return out;
}

bool types_overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
  for (const std::string& t : a) {
    if (b.count(t) != 0) return true;
    if (t == "number" && b.count("integer") != 0) return true;
    if (t == "integer" && b.count("number") != 0) return true;
  }
  return false;
}

bool values_disjoint(const Json& a, const Json& b) {
  for (const Json& x : a) {
    for (const Json& y : b) {
      if (x == y) return false;
    }
  }
  return true;
}

bool is_required(const Json& schema, const std::string& key) {
  if (!schema.contains("required") || !schema["required"].is_array()) return false;
  for (const Json& r : schema["required"]) {
    if (r == key) return true;
  }
  return false;
}

// Objects that both require a property whose listed values differ.
bool discriminated(const Json& a, const Json& b, const Json& root) {
  if (!a.contains("properties") || !b.contains("properties")) return false;
  const Json& pa = a["properties"];
  const Json& pb = b["properties"];
  if (!pa.is_object() || !pb.is_object()) return false;
  for (const auto& [key, sub_a] : pa.items()) {
    if (!pb.contains(key) || !is_required(a, key) || !is_required(b, key)) continue;
    Json storage_a, storage_b;
    const Json* va = listed_values(resolve(sub_a, root), storage_a);
    const Json* vb = listed_values(resolve(pb[key], root), storage_b);
    if (va != nullptr && vb != nullptr && values_disjoint(*va, *vb)) return true;
  }
  return false;
}

}  // namespace

bool schemas_disjoint(const Json& a_in, const Json& b_in, const Json& root) {
  const Json& a = resolve(a_in, root);
  const Json& b = resolve(b_in, root);
  if (!types_overlap(types_of(a), types_of(b))) return true;
  Json storage_a, storage_b;
  const Json* va = listed_values(a, storage_a);
  const Json* vb = listed_values(b, storage_b);
  if (va != nullptr && vb != nullptr) return values_disjoint(*va, *vb);
  if (a.is_object() && b.is_object()) return discriminated(a, b, root);
  return false;
}

}  // namespace specstack::grammar

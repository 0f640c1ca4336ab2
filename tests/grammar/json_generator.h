// Seeded random JSON documents that conform to a schema of the subset
// grammar/json_schema.h compiles (for the property tests), and a
// serializer with a random whitespace style within the grammar's policy.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "base/check.h"

namespace specstack::testing {

class JsonGenerator {
 public:
  using Json = nlohmann::ordered_json;
  JsonGenerator(const Json& root, uint64_t seed) : root_(root), rng_(seed) {}

  Json generate() { return value(root_, 0); }

  // Compact, or pretty-printed with a random indent (at most 20 columns at
  // the deepest level, as the grammar allows), or one space after separators.
  std::string serialize(const Json& doc) {
    switch (pick(3)) {
      case 0:
        return doc.dump();
      case 1:
        return doc.dump(1 + pick(2));
      default: {
        std::string compact = doc.dump(), out;
        bool in_string = false;
        for (size_t i = 0; i < compact.size(); ++i) {
          const char c = compact[i];
          out += c;
          if (in_string && c == '\\') {
            out += compact[++i];  // an escaped character never ends the string
          } else if (c == '"') {
            in_string = !in_string;
          } else if (!in_string && (c == ',' || c == ':')) {
            out += ' ';
          }
        }
        return out;
      }
    }
  }

 private:
  int pick(int n) { return static_cast<int>(rng_() % static_cast<uint64_t>(n)); }

  std::string random_string(size_t min, size_t max) {
    // ASCII, escapes, and multi-byte characters, so tokens split UTF-8.
    static const std::vector<std::string> pieces = {
        "a",  "b", "Z", " ",    "0", "9",     "_",      "-", ".", "\"", "\\", "/", "\n",
        "\t", "é", "€", "日本", "😀", "hello", " world", "{", "}", "[",  ":",  ","};
    const size_t n = min + static_cast<size_t>(pick(static_cast<int>(max - min + 1)));
    std::string out;
    size_t chars = 0;
    while (chars < n) {
      std::string p = pieces[static_cast<size_t>(pick(static_cast<int>(pieces.size())))];
      size_t len = 0;
      for (unsigned char c : p) len += (c & 0xC0) != 0x80;
      if (chars + len > n) p = "x", len = 1;
      out += p;
      chars += len;
    }
    return out;
  }

  Json number(bool integer) {
    const int64_t magnitude = std::vector<int64_t>{1, 10, 1000, 1000000, 123456789012345}[pick(5)];
    const int64_t i =
        static_cast<int64_t>(rng_() % static_cast<uint64_t>(magnitude)) - magnitude / 2;
    if (integer) return i;
    return static_cast<double>(i) + static_cast<double>(pick(1000)) / 8.0;
  }

  Json value(const Json& schema, int depth) {
    if (schema.is_boolean()) return any(depth);
    if (schema.contains("$ref")) {
      const std::string ref = schema["$ref"];
      if (ref == "#") return value(root_, depth + 1);
      const auto slash = ref.rfind('/');
      return value(root_[ref.substr(2, slash - 2)][ref.substr(slash + 1)], depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (schema.contains(key)) {
        const Json& alts = schema[key];
        // Deep in a recursive schema, prefer the first branch (a leaf by convention).
        return value(alts[depth > 4 ? 0 : static_cast<size_t>(pick(static_cast<int>(alts.size())))],
                     depth + 1);
      }
    }
    if (schema.contains("const")) return schema["const"];
    if (schema.contains("enum"))
      return schema["enum"][static_cast<size_t>(pick(static_cast<int>(schema["enum"].size())))];
    std::string type = "object";
    if (schema.contains("type")) {
      const Json& t = schema["type"];
      type = t.is_array()
                 ? t[static_cast<size_t>(pick(static_cast<int>(t.size())))].get<std::string>()
                 : t.get<std::string>();
    } else if (!schema.contains("properties")) {
      return any(depth);
    }
    if (type == "null") return nullptr;
    if (type == "boolean") return pick(2) == 0;
    if (type == "integer") return number(true);
    if (type == "number") return number(pick(2) == 0);
    if (type == "string") {
      if (schema.contains("format")) {
        const std::string f = schema["format"];
        char buf[64];
        if (f == "date") {
          snprintf(buf, sizeof buf, "%04d-%02d-%02d", pick(3000), 1 + pick(12), 1 + pick(28));
          return buf;
        }
        if (f == "uuid") return "3fa85f64-5717-4562-b3fc-2c963f66afa6";
        snprintf(buf, sizeof buf, "20%02d-0%d-1%dT%02d:%02d:%02d%s", pick(100), 1 + pick(9),
                 pick(10), pick(24), pick(60), pick(60), pick(2) ? "Z" : "+05:30");
        return buf;
      }
      if (schema.contains("pattern")) {
        // The one pattern the property tests use.
        SS_CHECK_EQ(schema["pattern"].get<std::string>(), std::string("^[A-Z]{2}-[0-9]{2,4}$"));
        std::string out = {static_cast<char>('A' + pick(26)), static_cast<char>('A' + pick(26)),
                           '-'};
        for (int i = 0, n = 2 + pick(3); i < n; ++i) out += static_cast<char>('0' + pick(10));
        return out;
      }
      const size_t min = schema.value("minLength", 0);
      const size_t max = schema.value("maxLength", min + 12);
      return random_string(min, max);
    }
    if (type == "array") {
      const size_t min = schema.value("minItems", 0);
      const size_t max = std::min<size_t>(schema.value("maxItems", min + 4), min + 4);
      const size_t n = min + static_cast<size_t>(pick(static_cast<int>(max - min + 1)));
      Json out = Json::array();
      for (size_t i = 0; i < n; ++i)
        out.push_back(value(schema.value("items", Json(true)), depth + 1));
      return out;
    }
    // object
    Json out = Json::object();
    if (!schema.contains("properties") && !schema.contains("additionalProperties")) {
      if (pick(3) == 0) return out;
      return Json::object({{random_string(1, 4), any(depth + 1)}});
    }
    const Json props = schema.value("properties", Json::object());
    const Json required = schema.value("required", Json::array());
    for (const auto& [key, sub] : props.items()) {
      bool req = false;
      for (const Json& r : required) req = req || r == key;
      if (req || pick(2) == 0) out[key] = value(sub, depth + 1);
    }
    return out;
  }

  Json any(int depth) {
    switch (pick(depth > 3 ? 4 : 6)) {
      case 0:
        return nullptr;
      case 1:
        return pick(2) == 0;
      case 2:
        return number(false);
      case 3:
        return random_string(0, 6);
      case 4:
        return Json::array({any(depth + 1), any(depth + 1)});
      default:
        return Json::object({{random_string(1, 4), any(depth + 1)}});
    }
  }

  const Json& root_;
  std::mt19937_64 rng_;
};

}  // namespace specstack::testing

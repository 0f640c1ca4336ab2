#include "chat/jinja_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

Value make_string(std::string text, JsonStrings strings) {
  return strings == JsonStrings::kUserText ? Value::user_text(std::move(text))
                                           : Value::string(std::move(text));
}

Result<Value> convert(const nlohmann::ordered_json& json, uint32_t depth_left,
                      JsonStrings strings) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null:
      return Value::none();
    case Type::boolean:
      return Value::boolean(json.get<bool>());
    case Type::number_integer:
      return Value::integer(json.get<int64_t>());
    case Type::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Value::integer(static_cast<int64_t>(u));
      }
      return Value::floating(static_cast<double>(u));
    }
    case Type::number_float:
      return Value::floating(json.get<double>());
    case Type::string:
      return make_string(json.get<std::string>(), strings);
    case Type::array: {
      if (depth_left == 0) return make_error("context JSON is nested too deeply");
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        SS_ASSIGN_OR_RETURN(Value v, convert(item, depth_left - 1, strings));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case Type::object: {
      if (depth_left == 0) return make_error("context JSON is nested too deeply");
      DictData dict;
      dict.entries.reserve(json.size());
      for (const auto& [key, item] : json.items()) {
        SS_ASSIGN_OR_RETURN(Value v, convert(item, depth_left - 1, strings));
        dict.entries.emplace_back(make_string(key, strings), std::move(v));
      }
      return Value::dict(std::move(dict));
    }
    default:
      return errorf("context JSON holds an unsupported value of type '{}'", json.type_name());
  }
}

void append_escaped_code_unit(std::string& out, uint32_t unit) {
  out += fmt::format("\\u{:04x}", unit);
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : decode_utf8(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {  // UTF-16 surrogate pair, as Python writes it
            const uint32_t v = c - 0x10000;
            append_escaped_code_unit(out, 0xD800 + (v >> 10));
            append_escaped_code_unit(out, 0xDC00 + (v & 0x3FF));
          } else {
            append_escaped_code_unit(out, c);
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(f);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {}

  Status dump(const Value& v, int level, std::string& out) {
    if (out.size() > kMaxPrintedBytes)
      return errorf("JSON output exceeds {} bytes", kMaxPrintedBytes);
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return {};
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return {};
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return {};
      case Value::Kind::kFloat:
        out += json_float(v.as_double());
        return {};
      case Value::Kind::kString:
        append_json_string(out, v.as_string(), options_.ensure_ascii);
        return {};
      case Value::Kind::kList:
        return dump_list(v.as_list(), level, out);
      case Value::Kind::kDict:
        return dump_dict(v.as_dict(), level, out);
      default:
        return errorf("Object of type {} is not JSON serializable", v.type_name());
    }
  }

 private:
  void newline_indent(int level, std::string& out) const {
    if (!options_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *options_.indent;
  }

  Status dump_list(const ListData& list, int level, std::string& out) {
    if (list.items.empty()) {
      out += "[]";
      return {};
    }
    out += '[';
    newline_indent(level + 1, out);
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) {
        out += options_.item_separator;
        newline_indent(level + 1, out);
      }
      SS_TRY(dump(list.items[i], level + 1, out));
    }
    newline_indent(level, out);
    out += ']';
    return {};
  }

  // Python converts str/int/float/bool/None keys to strings; others are a TypeError.
  static Result<std::string> key_text(const Value& key) {
    switch (key.kind()) {
      case Value::Kind::kString:
        return key.as_string();
      case Value::Kind::kNone:
        return std::string("null");
      case Value::Kind::kBool:
        return std::string(key.as_bool() ? "true" : "false");
      case Value::Kind::kInt:
        return std::to_string(key.as_int());
      case Value::Kind::kFloat:
        return json_float(key.as_double());
      default:
        return errorf("keys must be str, int, float, bool or None, not {}", key.type_name());
    }
  }

  Status dump_dict(const DictData& dict, int level, std::string& out) {
    if (dict.entries.empty()) {
      out += "{}";
      return {};
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      for (const auto* entry : entries) {
        if (!entry->first.is_string())
          return make_error("tojson(sort_keys=true) needs string keys");
      }
      std::stable_sort(entries.begin(), entries.end(), [](const auto* a, const auto* b) {
        return a->first.as_string() < b->first.as_string();
      });
    }
    out += '{';
    newline_indent(level + 1, out);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out += options_.item_separator;
        newline_indent(level + 1, out);
      }
      SS_ASSIGN_OR_RETURN(std::string key, key_text(entries[i]->first));
      append_json_string(out, key, options_.ensure_ascii);
      out += options_.key_separator;
      SS_TRY(dump(entries[i]->second, level + 1, out));
    }
    newline_indent(level, out);
    out += '}';
    return {};
  }

  const JsonDumpOptions& options_;
};

}  // namespace

Result<Value> value_from_json(const nlohmann::ordered_json& json, uint32_t max_depth,
                              JsonStrings strings) {
  return convert(json, max_depth, strings);
}

Result<std::string> dump_json(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  Dumper dumper(options);
  SS_TRY(dumper.dump(value, 0, out));
  return out;
}

}  // namespace specstack::jinja

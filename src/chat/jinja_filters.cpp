// jinja2's builtin filters on scalars and strings (the subset chat templates
// use), with tojson replaced by transformers' json.dumps version. Filters over
// sequences live in jinja_seq_filters.cpp.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/jinja_json.h"
#include "chat/jinja_marked.h"
#include "chat/jinja_util.h"
#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

template <std::string (*Fn)(std::string_view)>
Result<Value> string_filter(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "filter"));
  return derived_string(Fn(to_str(in)), {&in});
}

Result<Value> f_abs(const Value& in, const CallArgs& args) {
  if (in.is_float()) return Value::floating(std::fabs(in.as_double()));
  if (!in.is_int() && !in.is_bool())
    return errorf("bad operand type for abs(): '{}'", in.type_name());
  if (in.as_int() == INT64_MIN) return make_error("integer overflow in abs()");
  return Value::integer(std::abs(in.as_int()));
}

Result<Value> f_default(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"default_value", "boolean"}, "default"));
  if (in.is_undefined() || (a[1].truthy() && !in.truthy())) {
    return a[0].is_undefined() ? Value::string("") : a[0];
  }
  return in;
}

Result<Value> f_length(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "length"));
  SS_ASSIGN_OR_RETURN(int64_t n, length_of(in));
  return Value::integer(n);
}

Result<Value> f_replace(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"old", "new", "count"}, "replace"));
  SS_ASSIGN_OR_RETURN(int64_t count, int_or(a[2], -1, "replace count"));
  SS_ASSIGN_OR_RETURN(std::string text,
                      checked_replace(to_str(in), to_str(a[0]), to_str(a[1]), count));
  return derived_string(std::move(text), {&in, &a[0], &a[1]});
}

Result<Value> f_trim(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"chars"}, "trim"));
  SS_ASSIGN_OR_RETURN(auto chars, optional_string(a[0], "trim chars"));
  const Value text = to_marked_str(in);
  return located_piece(text, py_strip(text.as_string(), chars, true, true));
}

Result<Value> f_string(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "string"));
  return to_marked_str(in);
}

// jinja2's title filter capitalizes after "-", whitespace and opening brackets.
std::string jinja_title(std::string_view text) {
  std::string out;
  bool word_start = true;
  for (char32_t c : decode_utf8(text)) {
    const bool separator =
        is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    std::string one;
    append_utf8(one, c);
    out += separator ? one : (word_start ? py_upper(one) : py_lower(one));
    word_start = separator;
  }
  return out;
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Result<Value> f_tojson(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(
      auto a, bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson"));
  JsonDumpOptions options;
  options.ensure_ascii = a[0].truthy();
  // Indents wider than kMaxIndent only serve to blow up the output.
  constexpr int64_t kMaxIndent = 256;
  if (a[1].is_int()) {
    if (a[1].as_int() > kMaxIndent) return errorf("tojson indent is larger than {}", kMaxIndent);
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(a[1].as_int(), 0)), ' ');
  } else if (a[1].is_string()) {
    if (a[1].as_string().size() > kMaxIndent)
      return errorf("tojson indent is longer than {}", kMaxIndent);
    options.indent = a[1].as_string();
  } else if (!a[1].is_undefined() && !a[1].is_none()) {
    return errorf("tojson indent must be an int or str, not {}", a[1].type_name());
  }
  if (options.indent) options.item_separator.assign(1, ',');
  if (a[2].is_list()) {
    const auto& seps = a[2].as_list().items;
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
      return make_error("tojson separators must be two strings");
    }
    options.item_separator = seps[0].as_string();
    options.key_separator = seps[1].as_string();
  } else if (!a[2].is_undefined() && !a[2].is_none()) {
    return make_error("tojson separators must be a (item, key) pair");
  }
  options.sort_keys = a[3].truthy();
  SS_ASSIGN_OR_RETURN(std::string text, dump_json(in, options));
  return derived_string(std::move(text), {&in, &a[1], &a[2]});
}

// Python float(str): surrounding whitespace, underscores between digits, inf/nan.
std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(s[i - 1]) &&
        std::isdigit(s[i + 1])) {
      continue;
    }
    digits += s[i];
  }
  size_t start = (!digits.empty() && digits[0] == '+') ? 1 : 0;
  double value = 0;
  const auto r = std::from_chars(digits.data() + start, digits.data() + digits.size(), value);
  if (digits.size() == start || r.ec != std::errc() || r.ptr != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return value;
}

Result<Value> f_float(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"default"}, "float"));
  const Value fallback = a[0].is_undefined() ? Value::floating(0.0) : a[0];
  if (in.is_undefined()) return make_error(undefined_message(in));  // float(Undefined) raises
  if (in.is_number()) return Value::floating(in.as_double());
  if (in.is_string()) {
    if (auto f = parse_py_float(in.as_string())) return Value::floating(*f);
  }
  return fallback;
}

Result<Value> f_int(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"default", "base"}, "int"));
  const Value fallback = a[0].is_undefined() ? Value::integer(0) : a[0];
  SS_ASSIGN_OR_RETURN(int64_t base, int_or(a[1], 10, "int base"));
  if (base < 2 || base > 36) return make_error("int() base must be >= 2 and <= 36");
  if (in.is_undefined()) return make_error(undefined_message(in));  // int(Undefined) raises
  if (in.is_int() || in.is_bool()) return Value::integer(in.as_int());
  std::optional<double> f;
  if (in.is_float()) f = in.as_double();
  if (in.is_string()) {
    const std::string s = py_strip(in.as_string(), std::nullopt, true, true);
    int64_t i = 0;
    const size_t skip = (!s.empty() && s[0] == '+') ? 1 : 0;
    const auto r = std::from_chars(s.data() + skip, s.data() + s.size(), i, static_cast<int>(base));
    if (!s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size()) return Value::integer(i);
    f = parse_py_float(s);
  }
  if (f && std::isfinite(*f) && std::fabs(*f) < 9.2e18)
    return Value::integer(static_cast<int64_t>(*f));
  return fallback;
}

Result<Value> f_indent(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"width", "first", "blank"}, "indent"));
  if (!in.is_string()) return errorf("indent expects a string, not {}", in.type_name());
  std::string indentation = "    ";
  if (a[0].is_string()) {
    indentation = a[0].as_string();
  } else if (!a[0].is_undefined()) {
    SS_ASSIGN_OR_RETURN(int64_t width, int_or(a[0], 4, "indent width"));
    if (width > 256) return make_error("indent width is larger than 256");
    indentation.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  // jinja2 appends a newline first so splitlines() keeps a trailing empty line.
  const std::vector<std::string> lines = py_splitlines(in.as_string() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    // The first line is indented only with first=True, the others unless
    // they are empty (blank=True indents those too).
    const bool indent_line = i == 0 ? a[1].truthy() : (a[2].truthy() || !lines[i].empty());
    if (i > 0) out += '\n';
    if (indent_line) out += indentation;
    out += lines[i];
    if (out.size() > kMaxBuiltinBytes)
      return errorf("indent result exceeds {} bytes", kMaxBuiltinBytes);
  }
  return derived_string(std::move(out), {&in, &a[0]});
}

Result<Value> f_safe(const Value& in, const CallArgs& args) {
  return f_string(in, args);
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr std::array<NamedFilter, 19> kFilters = {{
    {"abs", f_abs},
    {"capitalize", string_filter<py_capitalize>},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"e", string_filter<html_escape>},
    {"escape", string_filter<html_escape>},
    {"float", f_float},
    {"indent", f_indent},
    {"int", f_int},
    {"length", f_length},
    {"lower", string_filter<py_lower>},
    {"replace", f_replace},
    {"safe", f_safe},
    {"string", f_string},
    {"title", string_filter<jinja_title>},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"upper", string_filter<py_upper>},
}};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const NamedFilter& f : kFilters) {
    if (f.name == name) return f.fn;
  }
  return find_sequence_filter(name);
}

}  // namespace specstack::jinja

// Attribute/item/slice access and the Python str/dict methods templates call
// (message.content.startswith(...), tool.items(), ...).
#include <array>

#include "chat/jinja_builtins.h"
#include "chat/jinja_marked.h"
#include "chat/jinja_util.h"
#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

using MethodFn = Result<Value> (*)(const Value& self, const CallArgs& args);
struct Method {
  std::string_view name;
  MethodFn fn;
};

Result<bool> matches_affix(const Value& self, const CallArgs& args, const char* what, bool prefix) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {what}, prefix ? "startswith" : "endswith"));
  std::vector<Value> candidates;
  if (a[0].is_list()) {
    candidates = a[0].as_list().items;
  } else {
    candidates.push_back(a[0]);
  }
  const std::string& s = self.as_string();
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return errorf("{} arg must be str or a tuple of str, not {}",
                    prefix ? "startswith" : "endswith", c.type_name());
    }
    if (prefix ? s.starts_with(c.as_string()) : s.ends_with(c.as_string())) return true;
  }
  return false;
}

Result<Value> str_startswith(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(bool b, matches_affix(self, args, "prefix", true));
  return Value::boolean(b);
}

Result<Value> str_endswith(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(bool b, matches_affix(self, args, "suffix", false));
  return Value::boolean(b);
}

Result<Value> split_impl(const Value& self, const CallArgs& args, bool from_right) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"sep", "maxsplit"}, "split"));
  SS_ASSIGN_OR_RETURN(auto sep, optional_string(a[0], "split() separator"));
  SS_ASSIGN_OR_RETURN(int64_t maxsplit, int_or(a[1], -1, "split() maxsplit"));
  if (sep && sep->empty()) return make_error("split(): empty separator");
  auto parts = from_right ? py_rsplit(self.as_string(), sep, maxsplit)
                          : py_split(self.as_string(), sep, maxsplit);
  return split_pieces(self, std::move(parts), sep ? sep->size() : 0);
}

Result<Value> str_split(const Value& self, const CallArgs& args) {
  return split_impl(self, args, false);
}
Result<Value> str_rsplit(const Value& self, const CallArgs& args) {
  return split_impl(self, args, true);
}

Result<Value> strip_impl(const Value& self, const CallArgs& args, bool left, bool right) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"chars"}, "strip"));
  SS_ASSIGN_OR_RETURN(auto chars, optional_string(a[0], "strip() chars"));
  return located_piece(self, py_strip(self.as_string(), chars, left, right));
}

Result<Value> str_strip(const Value& self, const CallArgs& args) {
  return strip_impl(self, args, true, true);
}
Result<Value> str_lstrip(const Value& self, const CallArgs& args) {
  return strip_impl(self, args, true, false);
}
Result<Value> str_rstrip(const Value& self, const CallArgs& args) {
  return strip_impl(self, args, false, true);
}

template <std::string (*Fn)(std::string_view)>
Result<Value> str_transform(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "str method"));
  return derived_string(Fn(self.as_string()), {&self});
}

template <bool (*Fn)(std::string_view)>
Result<Value> str_predicate(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "str method"));
  return Value::boolean(Fn(self.as_string()));
}

bool is_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

bool is_spaces(std::string_view s) {
  const std::u32string u = decode_utf8(s);
  if (u.empty()) return false;
  for (char32_t c : u) {
    if (!is_py_space(c)) return false;
  }
  return true;
}

Result<Value> str_replace(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"old", "new", "count"}, "replace"));
  if (!a[0].is_string() || !a[1].is_string()) return make_error("replace() arguments must be str");
  SS_ASSIGN_OR_RETURN(int64_t count, int_or(a[2], -1, "replace() count"));
  SS_ASSIGN_OR_RETURN(std::string text,
                      checked_replace(self.as_string(), a[0].as_string(), a[1].as_string(), count));
  return derived_string(std::move(text), {&self, &a[0], &a[1]});
}

Result<Value> str_find(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"sub"}, "find"));
  if (!a[0].is_string()) return make_error("find() argument must be str");
  const size_t pos = self.as_string().find(a[0].as_string());
  if (pos == std::string::npos) return Value::integer(-1);
  return Value::integer(static_cast<int64_t>(utf8_length(self.as_string().substr(0, pos))));
}

Result<Value> str_count(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"sub"}, "count"));
  if (!a[0].is_string()) return make_error("count() argument must be str");
  const std::string& s = self.as_string();
  const std::string& sub = a[0].as_string();
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(s)) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Result<Value> str_join(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"iterable"}, "join"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(a[0]));
  MarkedText out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return errorf("sequence item {}: expected str instance, {} found", i, items[i].type_name());
    }
    if (i > 0) out.append(self);
    out.append(items[i]);
    if (out.text.size() > kMaxBuiltinBytes)
      return errorf("join result exceeds {} bytes", kMaxBuiltinBytes);
  }
  return out.take();
}

Result<Value> str_splitlines(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "splitlines"));
  return split_pieces(self, py_splitlines(self.as_string()), 0);
}

Result<Value> dict_get(const Value& self, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"key", "default"}, "get"));
  const Value* found = self.as_dict().find(a[0]);
  if (found != nullptr) return *found;
  return a[1].is_undefined() ? Value::none() : a[1];
}

Result<Value> dict_items(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "items"));
  return dict_item_list(self.as_dict());
}

Result<Value> dict_keys(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "keys"));
  std::vector<Value> keys;
  for (const auto& entry : self.as_dict().entries) keys.push_back(entry.first);
  return Value::list(std::move(keys));
}

Result<Value> dict_values(const Value& self, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "values"));
  std::vector<Value> values;
  for (const auto& entry : self.as_dict().entries) values.push_back(entry.second);
  return Value::list(std::move(values));
}

constexpr std::array<Method, 21> kStrMethods = {{
    {"startswith", str_startswith},
    {"endswith", str_endswith},
    {"split", str_split},
    {"rsplit", str_rsplit},
    {"strip", str_strip},
    {"lstrip", str_lstrip},
    {"rstrip", str_rstrip},
    {"upper", str_transform<py_upper>},
    {"lower", str_transform<py_lower>},
    {"title", str_transform<py_title>},
    {"capitalize", str_transform<py_capitalize>},
    {"replace", str_replace},
    {"find", str_find},
    {"count", str_count},
    {"join", str_join},
    {"splitlines", str_splitlines},
    {"islower", str_predicate<py_islower>},
    {"isupper", str_predicate<py_isupper>},
    {"isdigit", str_predicate<is_digits>},
    {"isspace", str_predicate<is_spaces>},
    {"casefold", str_transform<py_lower>},
}};

constexpr std::array<Method, 4> kDictMethods = {{
    {"get", dict_get},
    {"items", dict_items},
    {"keys", dict_keys},
    {"values", dict_values},
}};

// Dict methods jinja2's immutable sandbox hides or that we do not offer: the
// name never falls back to a key lookup.
constexpr std::array<std::string_view, 7> kHiddenDictMethods = {
    "clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"};

template <size_t N>
std::optional<Value> bind_method(const std::array<Method, N>& table, const Value& self,
                                 std::string_view name) {
  for (const Method& m : table) {
    if (m.name != name) continue;
    const MethodFn fn = m.fn;
    return Value::function(std::string(name),
                           [self, fn](const CallArgs& args) { return fn(self, args); });
  }
  return std::nullopt;
}

Value missing_attr(const Value& object, std::string_view name) {
  return Value::undefined(
      fmt::format("'{} object' has no attribute '{}'", object.type_name(), name));
}

}  // namespace

Result<Value> get_attr(const Value& object, std::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return make_error(undefined_message(object));
    case Value::Kind::kString:
      if (auto m = bind_method(kStrMethods, object, name)) return *m;
      return missing_attr(object, name);
    case Value::Kind::kDict: {
      if (auto m = bind_method(kDictMethods, object, name)) return *m;
      for (std::string_view hidden : kHiddenDictMethods) {
        if (hidden == name) return missing_attr(object, name);
      }
      const Value* found = object.as_dict().find(name);
      return found != nullptr ? *found : missing_attr(object, name);
    }
    case Value::Kind::kNamespace: {
      const Value* found = object.as_namespace().attrs.find(name);
      return found != nullptr ? *found : missing_attr(object, name);
    }
    default:
      return missing_attr(object, name);
  }
}

Result<Value> get_item(const Value& object, const Value& key) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return make_error(undefined_message(object));
    case Value::Kind::kDict:
      if (const Value* found = object.as_dict().find(key)) return *found;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        const bool is_list = object.is_list();
        const std::u32string chars = is_list ? std::u32string() : decode_utf8(object.as_string());
        const int64_t n = is_list ? static_cast<int64_t>(object.as_list().items.size())
                                  : static_cast<int64_t>(chars.size());
        int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i < 0 || i >= n) {
          return Value::undefined(
              fmt::format("{} object has no element {}", object.type_name(), key.as_int()));
        }
        if (is_list) return object.as_list().items[i];
        return pick_chars(object, chars, {static_cast<size_t>(i)});
      }
      break;
    default:
      break;
  }
  if (key.is_string()) return get_attr(object, key.as_string());
  return Value::undefined(
      fmt::format("'{} object' has no item {}", object.type_name(), to_repr(key)));
}

Result<Value> get_slice(const Value& object, const Value& start, const Value& stop,
                        const Value& step) {
  if (object.is_undefined()) return make_error(undefined_message(object));
  if (!object.is_list() && !object.is_string()) {
    return Value::undefined(fmt::format("'{} object' cannot be sliced", object.type_name()));
  }
  SS_ASSIGN_OR_RETURN(int64_t step_v, int_or(step, 1, "slice step"));
  if (step_v == 0) return make_error("slice step cannot be zero");
  const std::u32string chars =
      object.is_string() ? decode_utf8(object.as_string()) : std::u32string();
  const int64_t n = object.is_list() ? static_cast<int64_t>(object.as_list().items.size())
                                     : static_cast<int64_t>(chars.size());
  // CPython's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t fallback) -> Result<int64_t> {
    SS_ASSIGN_OR_RETURN(int64_t i, int_or(v, fallback, "slice index"));
    if (v.is_undefined() || v.is_none()) return i;
    if (i < 0) {
      i += n;
      if (i < 0) i = step_v < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step_v < 0 ? n - 1 : n;
    }
    return i;
  };
  SS_ASSIGN_OR_RETURN(int64_t lo, adjust(start, step_v < 0 ? n - 1 : 0));
  SS_ASSIGN_OR_RETURN(int64_t hi, adjust(stop, step_v < 0 ? -1 : n));
  std::vector<Value> items;
  std::vector<size_t> picks;
  for (int64_t i = lo; step_v > 0 ? i < hi : i > hi; i += step_v) {
    if (object.is_list()) {
      items.push_back(object.as_list().items[i]);
    } else {
      picks.push_back(static_cast<size_t>(i));
    }
  }
  if (object.is_string()) return pick_chars(object, chars, picks);
  return Value::list(std::move(items), object.as_list().is_tuple);
}

Result<Value> get_attr_path(const Value& object, std::string_view path) {
  Value current = object;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string_view part =
        path.substr(begin, dot == std::string_view::npos ? dot : dot - begin);
    const bool numeric =
        !part.empty() && part.find_first_not_of("0123456789") == std::string_view::npos;
    const Value key = numeric && part.size() < 18 ? Value::integer(std::stoll(std::string(part)))
                                                  : Value::string(std::string(part));
    SS_ASSIGN_OR_RETURN(current, get_item(current, key));
    if (dot == std::string_view::npos) return current;
    begin = dot + 1;
  }
}

}  // namespace specstack::jinja

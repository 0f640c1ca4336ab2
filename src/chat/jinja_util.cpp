#include "chat/jinja_util.h"

#include "chat/jinja_builtins.h"
#include "chat/py_string.h"

namespace specstack::jinja {

std::string undefined_message(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return hint.empty() ? std::string("undefined value") : hint;
}

Result<std::optional<std::string>> optional_string(const Value& v, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) return errorf("{} must be str or None, not {}", what, v.type_name());
  return std::optional<std::string>(v.as_string());
}

Result<int64_t> int_or(const Value& v, int64_t fallback, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    return errorf("{} must be an integer, not {}", what, v.type_name());
  return v.as_int();
}

Value string_list(const std::vector<std::string>& items) {
  std::vector<Value> values;
  values.reserve(items.size());
  for (const std::string& s : items) values.push_back(Value::string(s));
  return Value::list(std::move(values));
}

Value dict_item_list(const DictData& dict) {
  std::vector<Value> pairs;
  pairs.reserve(dict.entries.size());
  for (const auto& [key, value] : dict.entries) pairs.push_back(Value::list({key, value}, true));
  return Value::list(std::move(pairs));
}

bool contains_namespace(const Value& v) {
  if (v.is_namespace()) return true;
  if (v.is_list()) {
    for (const Value& item : v.as_list().items) {
      if (contains_namespace(item)) return true;
    }
  } else if (v.is_dict()) {
    for (const auto& [key, value] : v.as_dict().entries) {
      if (contains_namespace(key) || contains_namespace(value)) return true;
    }
  }
  return false;
}

Result<std::string> checked_replace(std::string_view text, std::string_view old,
                                    std::string_view with, int64_t count) {
  // Count the replacements first so the result size is known before building it.
  uint64_t n = 0;
  const uint64_t limit = count < 0 ? UINT64_MAX : static_cast<uint64_t>(count);
  if (old.empty()) {
    n = std::min<uint64_t>(limit, utf8_length(text) + 1);
  } else {
    for (size_t p = text.find(old); p != std::string_view::npos && n < limit;
         p = text.find(old, p + old.size())) {
      ++n;
    }
  }
  if (with.size() > old.size() && n > 0 &&
      (with.size() - old.size()) >
          (kMaxBuiltinBytes - std::min(text.size(), kMaxBuiltinBytes)) / n) {
    return errorf("replace result exceeds {} bytes", kMaxBuiltinBytes);
  }
  return py_replace(text, old, with, count);
}

}  // namespace specstack::jinja

#include "chat/jinja_util.h"

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
  if (!v.is_int() && !v.is_bool()) return errorf("{} must be an integer, not {}", what, v.type_name());
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

}  // namespace specstack::jinja

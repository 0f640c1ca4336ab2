#include "tokenizer/json_fields.h"

namespace specstack::tok {

Result<const Json*> require_field(const Json& obj, std::string_view key, const std::string& path) {
  if (!obj.is_object()) return errorf("{}: expected an object", path.empty() ? "top level" : path);
  const Json* value = find_field(obj, key);
  if (value == nullptr) return errorf("{}: missing", field_path(path, key));
  return value;
}

Result<const Json*> require_array(const Json& obj, std::string_view key, const std::string& path) {
  SS_ASSIGN_OR_RETURN(const Json* value, require_field(obj, key, path));
  if (!value->is_array()) return errorf("{}: expected an array", field_path(path, key));
  return value;
}

Result<std::string> require_string(const Json& obj, std::string_view key, const std::string& path) {
  SS_ASSIGN_OR_RETURN(const Json* value, require_field(obj, key, path));
  if (!value->is_string()) return errorf("{}: expected a string", field_path(path, key));
  return value->get<std::string>();
}

Result<std::optional<std::string>> optional_string(const Json& obj, std::string_view key,
                                                   const std::string& path) {
  const Json* value = find_field(obj, key);
  if (value == nullptr || value->is_null()) return std::optional<std::string>();
  if (!value->is_string()) return errorf("{}: expected a string", field_path(path, key));
  return std::optional<std::string>(value->get<std::string>());
}

Result<bool> optional_bool(const Json& obj, std::string_view key, bool fallback,
                           const std::string& path) {
  const Json* value = find_field(obj, key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_boolean()) return errorf("{}: expected true or false", field_path(path, key));
  return value->get<bool>();
}

Result<int64_t> optional_int(const Json& obj, std::string_view key, int64_t fallback,
                             const std::string& path) {
  const Json* value = find_field(obj, key);
  if (value == nullptr || value->is_null()) return fallback;
  if (!value->is_number_integer()) return errorf("{}: expected an integer", field_path(path, key));
  return value->get<int64_t>();
}

Result<int32_t> as_token_id(const Json& value, const std::string& path) {
  if (!value.is_number_integer()) return errorf("{}: expected an integer token id", path);
  if (value.is_number_unsigned()
          ? value.get<uint64_t>() > uint64_t(kMaxTokenId)
          : (value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxTokenId)) {
    return errorf("{}: token id {} is outside [0, {}]", path, value.dump(), kMaxTokenId);
  }
  return static_cast<int32_t>(value.get<int64_t>());
}

Result<std::pair<std::string, bool>> parse_pattern(const Json& obj, std::string_view key,
                                                   const std::string& path) {
  SS_ASSIGN_OR_RETURN(const Json* pattern, require_field(obj, key, path));
  const std::string where = field_path(path, key);
  if (const Json* s = find_field(*pattern, "String"); s != nullptr && s->is_string()) {
    return std::pair{s->get<std::string>(), false};
  }
  if (const Json* r = find_field(*pattern, "Regex"); r != nullptr && r->is_string()) {
    return std::pair{r->get<std::string>(), true};
  }
  return errorf("{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

}  // namespace specstack::tok

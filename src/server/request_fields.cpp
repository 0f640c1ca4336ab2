#include "server/request_fields.h"

#include <cmath>
#include <limits>

namespace specstack {
namespace {

// Deeper bodies are rejected before nlohmann builds them: copying or
// rendering a value recurses once per level, and no OpenAI request needs more.
constexpr int kMaxJsonDepth = 64;

// Offset of the first byte that does not start or continue a valid UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF are
// invalid), or npos.
size_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto lead = static_cast<unsigned char>(s[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) lo = 0xA0;  // overlong
      if (lead == 0xED) hi = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) lo = 0x90;  // overlong
      if (lead == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
      return i;
    }
    if (i + length > s.size()) return i;
    const auto second = static_cast<unsigned char>(s[i + 1]);
    if (second < lo || second > hi) return i;
    for (size_t k = 2; k < length; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

// Nesting depth of [ and { outside strings; the text need not be valid JSON.
int max_nesting_depth(std::string_view s) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

const OrderedJson* find_field(const OrderedJson& object, std::string_view name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

Error type_error(std::string_view name, std::string_view expected, const OrderedJson& value) {
  return errorf("'{}' must be {}, got {}", name, expected, json_type_name(value));
}

}  // namespace

Result<OrderedJson> parse_json_object(std::string_view body) {
  if (size_t bad = first_invalid_utf8(body); bad != std::string_view::npos) {
    return errorf("request body is not valid UTF-8 (byte offset {})", bad);
  }
  if (max_nesting_depth(body) > kMaxJsonDepth) {
    return errorf("request body nests JSON deeper than {} levels", kMaxJsonDepth);
  }
  OrderedJson parsed;
  try {
    parsed = OrderedJson::parse(body);
  } catch (const OrderedJson::exception& error) {  // parse_error; out_of_range for 1e999
    std::string what = error.what();
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ..."
    if (size_t close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
    return errorf("request body is not valid JSON: {}", what);
  }
  if (!parsed.is_object()) {
    return errorf("request body must be a JSON object, got {}", json_type_name(parsed));
  }
  return parsed;
}

const char* json_type_name(const OrderedJson& value) {
  if (value.is_number()) return "number";  // nlohmann says "number" too; be explicit
  return value.type_name();
}

Result<std::optional<double>> get_number(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return std::optional<double>();
  if (!field->is_number()) return type_error(name, "a number", *field);
  return std::optional<double>(field->get<double>());
}

Result<std::optional<int64_t>> get_integer(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return std::optional<int64_t>();
  if (field->is_number_unsigned()) {
    const uint64_t value = field->get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return errorf("'{}' is out of range, got {}", name, value);
    }
    return std::optional<int64_t>(static_cast<int64_t>(value));
  }
  if (field->is_number_integer()) return std::optional<int64_t>(field->get<int64_t>());
  if (field->is_number_float()) {
    const double value = field->get<double>();
    // 2^63 is exactly representable; anything at or past it does not fit.
    if (std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 9.2e18) {
      return std::optional<int64_t>(static_cast<int64_t>(value));
    }
    return errorf("'{}' must be an integer, got {}", name, value);
  }
  return type_error(name, "an integer", *field);
}

Result<std::optional<uint64_t>> get_seed(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return std::optional<uint64_t>();
  if (field->is_number_unsigned()) return std::optional<uint64_t>(field->get<uint64_t>());
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> value, get_integer(object, name));
  return std::optional<uint64_t>(static_cast<uint64_t>(*value));
}

Result<std::optional<bool>> get_bool(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return std::optional<bool>();
  if (!field->is_boolean()) return type_error(name, "a boolean", *field);
  return std::optional<bool>(field->get<bool>());
}

Result<std::optional<std::string>> get_string(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return std::optional<std::string>();
  if (!field->is_string()) return type_error(name, "a string", *field);
  return std::optional<std::string>(field->get<std::string>());
}

Result<std::vector<std::string>> get_string_list(const OrderedJson& object, std::string_view name) {
  std::vector<std::string> values;
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return values;
  if (field->is_string()) {
    values.push_back(field->get<std::string>());
    return values;
  }
  if (!field->is_array()) return type_error(name, "a string or an array of strings", *field);
  for (size_t i = 0; i < field->size(); ++i) {
    const OrderedJson& item = (*field)[i];
    if (!item.is_string()) {
      return errorf("'{}[{}]' must be a string, got {}", name, i, json_type_name(item));
    }
    values.push_back(item.get<std::string>());
  }
  return values;
}

Result<std::vector<int32_t>> get_int32_list(const OrderedJson& object, std::string_view name) {
  std::vector<int32_t> values;
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return values;
  if (!field->is_array()) return type_error(name, "an array of integers", *field);
  for (size_t i = 0; i < field->size(); ++i) {
    const OrderedJson& item = (*field)[i];
    const bool fits = (item.is_number_integer() && item.get<int64_t>() >= INT32_MIN &&
                       item.get<int64_t>() <= INT32_MAX) ||
                      (item.is_number_unsigned() && item.get<uint64_t>() <= INT32_MAX);
    if (!fits) {
      return errorf("'{}[{}]' must be a 32-bit integer, got {}", name, i,
                    item.is_number() ? item.dump() : json_type_name(item));
    }
    values.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return values;
}

Result<const OrderedJson*> get_object(const OrderedJson& object, std::string_view name) {
  const OrderedJson* field = find_field(object, name);
  if (field == nullptr) return static_cast<const OrderedJson*>(nullptr);
  if (!field->is_object()) return type_error(name, "an object", *field);
  return field;
}

Status check_number_range(std::string_view name, double value, double lo, double hi,
                          bool lo_inclusive) {
  // Written so that NaN fails (JSON has no NaN, but doubles can overflow to inf).
  const bool above_lo = lo_inclusive ? value >= lo : value > lo;
  if (above_lo && value <= hi) return Status::ok_status();
  return errorf("'{}' must be in {}{}, {}], got {}", name, lo_inclusive ? "[" : "(", lo, hi, value);
}

Status check_integer_range(std::string_view name, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return Status::ok_status();
  return errorf("'{}' must be in [{}, {}], got {}", name, lo, hi, value);
}

}  // namespace specstack

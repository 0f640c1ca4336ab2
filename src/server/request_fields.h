// Typed access to the fields of a JSON request body. Each getter returns
// nullopt when the field is absent or null (OpenAI treats null as "use the
// default"), and an error naming the field when it has the wrong type, so the
// request parser never touches a nlohmann exception.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace specstack {

using OrderedJson = nlohmann::ordered_json;

// Parses a request body: it must be valid UTF-8 (the error names the byte
// offset), valid JSON and a JSON object.
Result<OrderedJson> parse_json_object(std::string_view body);

// The JSON type name for messages ("string", "number", "array", ...).
const char* json_type_name(const OrderedJson& value);

Result<std::optional<double>> get_number(const OrderedJson& object, std::string_view name);
// Integers; a float with no fraction (e.g. 16.0) is accepted as pydantic does.
Result<std::optional<int64_t>> get_integer(const OrderedJson& object, std::string_view name);
// An integer seed: any int64 or uint64 (negative seeds keep their bit pattern).
Result<std::optional<uint64_t>> get_seed(const OrderedJson& object, std::string_view name);
Result<std::optional<bool>> get_bool(const OrderedJson& object, std::string_view name);
Result<std::optional<std::string>> get_string(const OrderedJson& object, std::string_view name);
// A string or an array of strings (OpenAI's `stop`); absent -> empty.
Result<std::vector<std::string>> get_string_list(const OrderedJson& object, std::string_view name);
// An array of int32 values; absent -> empty.
Result<std::vector<int32_t>> get_int32_list(const OrderedJson& object, std::string_view name);
// The field if it is an object, nullptr if absent or null.
Result<const OrderedJson*> get_object(const OrderedJson& object, std::string_view name);

// Range checks with messages naming the field: "'top_p' must be in (0, 1], got 2".
Status check_number_range(std::string_view name, double value, double lo, double hi,
                          bool lo_inclusive = true);
Status check_integer_range(std::string_view name, int64_t value, int64_t lo, int64_t hi);

}  // namespace specstack

// Typed, path-aware access to tokenizer.json fields: every failure is an
// Error naming the field (e.g. "normalizer.normalizers[1].prepend: expected
// a string"), never an exception or an abort.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace specstack::tok {

using Json = nlohmann::json;

// Nesting of Sequence components that we accept; deeper files are refused
// rather than recursed into (they come from untrusted bytes).
inline constexpr int kMaxComponentDepth = 16;

inline std::string field_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}
inline std::string index_path(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

// The member, or nullptr when it is absent (or obj is not an object).
inline const Json* find_field(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

Result<const Json*> require_field(const Json& obj, std::string_view key, const std::string& path);
Result<const Json*> require_array(const Json& obj, std::string_view key, const std::string& path);
Result<std::string> require_string(const Json& obj, std::string_view key, const std::string& path);
// Absent or null: nullopt.
Result<std::optional<std::string>> optional_string(const Json& obj, std::string_view key,
                                                   const std::string& path);
// Absent or null: fallback.
Result<bool> optional_bool(const Json& obj, std::string_view key, bool fallback,
                           const std::string& path);
Result<int64_t> optional_int(const Json& obj, std::string_view key, int64_t fallback,
                             const std::string& path);
// A token id: an integer in [0, kMaxTokenId].
Result<int32_t> as_token_id(const Json& value, const std::string& path);
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

// A {"String": s} or {"Regex": r} pattern object: (text, is_regex).
Result<std::pair<std::string, bool>> parse_pattern(const Json& obj, std::string_view key,
                                                   const std::string& path);

}  // namespace specstack::tok

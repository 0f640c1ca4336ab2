// A string -> token id hash map that string_views can query without copying.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace specstack::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using TokenIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace specstack::tok

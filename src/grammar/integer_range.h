// Bounded integers as grammar: JSON schema minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on "type": "integer" compile to a GBNF
// expression matching exactly the decimal integers in [lo, hi] (no leading
// zeros, "-0" excluded), so a bound holds by construction, not by checking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace specstack::grammar {

// JSON integers have at most 16 digits here (json_schema.h's number limit),
// so bounds are clamped to +-kMaxJsonInteger.
inline constexpr int64_t kMaxJsonInteger = 9999999999999999;  // 16 nines

// A GBNF expression for the integers in [lo, hi] (a missing side is
// unbounded, i.e. up to 16 digits). Precondition: lo <= hi after clamping.
std::string integer_range_gbnf(std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace specstack::grammar

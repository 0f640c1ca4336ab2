// Bounded numbers as grammar: JSON schema minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on "type": "number", when the bounds
// are whole numbers, compile to a GBNF expression matching exactly the
// decimal numbers in the range (an integer part from
// grammar/integer_range.h, then a fraction whose digits the edges
// constrain: at an inclusive upper edge only zeros, at an exclusive lower
// edge at least one non-zero digit). A bounded number has no exponent (so a
// bound holds by construction, not by checking); fractional bounds are a
// 400 (the caller's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace specstack::grammar {

struct NumberBound {
  int64_t value = 0;  // within +-kMaxJsonInteger
  bool exclusive = false;
};

// The GBNF expression, or "" when no number is in the range.
std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace specstack::grammar

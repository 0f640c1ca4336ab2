#include "grammar/number_range.h"

#include <vector>

#include "grammar/integer_range.h"

namespace specstack::grammar {
namespace {

// Fractions (after the integer part): any, none-or-zeros, or non-zero.
constexpr const char* kAnyFraction = "(\".\" [0-9]{1,16})?";
constexpr const char* kZeroFraction = "(\".\" \"0\"{1,16})?";
constexpr const char* kNonZeroFraction = "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}";

// Magnitudes m = I.F (no sign) with lo <= m (or < when exclusive) and m <= hi
// (or <); lo.value >= 0. "" when none.
std::string magnitudes(NumberBound lo, std::optional<NumberBound> hi) {
  std::vector<std::string> alts;
  const std::string lo_digits = std::to_string(lo.value);
  if (hi && hi->value < lo.value) return "";
  if (hi && hi->value == lo.value) {
    if (lo.exclusive || hi->exclusive) return "";
    return "\"" + lo_digits + "\" " + kZeroFraction;
  }
  // Integer part at the low edge: any fraction, or a non-zero one when the
  // edge itself is excluded.
  alts.push_back("\"" + lo_digits + "\" " +
                 (lo.exclusive ? std::string("(") + kNonZeroFraction + ")" : kAnyFraction));
  // Integer parts strictly inside: any fraction.
  const int64_t first = lo.value + 1;
  const std::optional<int64_t> last =
      hi ? std::optional<int64_t>(hi->value - 1) : std::optional<int64_t>();
  if (first <= kMaxJsonInteger && (!last || first <= *last)) {
    alts.push_back(integer_range_gbnf(first, last) + " " + kAnyFraction);
  }
  // Integer part at the high edge: only zeros after it, when included.
  if (hi && !hi->exclusive)
    alts.push_back("\"" + std::to_string(hi->value) + "\" " + kZeroFraction);
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(" : " | (") + a + ")";
  return out;
}

}  // namespace

std::string number_range_gbnf(std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  std::vector<std::string> alts;
  // x >= 0: magnitudes from max(lo, 0) to hi.
  if (!hi || hi->value > 0 || (hi->value == 0 && !hi->exclusive)) {
    const NumberBound from = lo && lo->value >= 0 ? *lo : NumberBound{0, false};
    if (std::string m = magnitudes(from, hi); !m.empty()) alts.push_back(m);
  }
  // x < 0: "-" and magnitudes from max(-hi, 0) to -lo ("-0" only where 0 is in range).
  if (!lo || lo->value < 0) {
    const NumberBound from =
        hi && hi->value <= 0 ? NumberBound{-hi->value, hi->exclusive} : NumberBound{0, false};
    std::optional<NumberBound> to;
    if (lo) to = NumberBound{-lo->value, lo->exclusive};
    if (std::string m = magnitudes(from, to); !m.empty()) alts.push_back("\"-\" (" + m + ")");
  }
  std::string out;
  for (const std::string& a : alts) out += (out.empty() ? "(" : " | (") + a + ")";
  return out.empty() ? "" : "(" + out + ")";
}

}  // namespace specstack::grammar

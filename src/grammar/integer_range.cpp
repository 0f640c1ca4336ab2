#include "grammar/integer_range.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.h"

namespace specstack::grammar {
namespace {

// "[a-b]" of one digit, or the digit itself.
std::string digit_class(char a, char b) {
  if (a == b) return fmt::format("\"{}\"", a);
  return fmt::format("[{}-{}]", a, b);
}

// Decimal strings of equal length n: every string s with lo <= s <= hi
// (leading zeros allowed here; the caller picks lo without them). The
// classic split: a shared first digit recurses, otherwise the low edge, the
// full middle digits and the high edge.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 0) return "\"\"";
  const std::string rest_lo = lo.substr(1), rest_hi = hi.substr(1);
  const bool full_rest = rest_lo == std::string(n - 1, '0') && rest_hi == std::string(n - 1, '9');
  const std::string any_rest = n > 1 ? fmt::format(" [0-9]{{{}}}", n - 1) : "";
  if (full_rest) return digit_class(lo[0], hi[0]) + any_rest;
  if (lo[0] == hi[0]) {
    return digit_class(lo[0], lo[0]) + " (" + same_length_range(rest_lo, rest_hi) + ")";
  }
  std::string out =
      digit_class(lo[0], lo[0]) + " (" + same_length_range(rest_lo, std::string(n - 1, '9')) + ")";
  if (lo[0] + 1 <= hi[0] - 1) out += " | " + digit_class(lo[0] + 1, hi[0] - 1) + any_rest;
  out += " | " + digit_class(hi[0], hi[0]) + " (" +
         same_length_range(std::string(n - 1, '0'), rest_hi) + ")";
  return out;
}

// Non-negative integers in [lo, hi] without leading zeros, one alternative
// per digit count.
std::string non_negative_range(int64_t lo, int64_t hi) {
  SS_CHECK_LE(lo, hi);
  const std::string lo_text = std::to_string(lo), hi_text = std::to_string(hi);
  std::string out;
  for (size_t len = lo_text.size(); len <= hi_text.size(); ++len) {
    const std::string first = len == lo_text.size() ? lo_text : "1" + std::string(len - 1, '0');
    const std::string last = len == hi_text.size() ? hi_text : std::string(len, '9');
    out += (out.empty() ? "(" : " | (") + same_length_range(first, last) + ")";
  }
  return out;
}

}  // namespace

std::string integer_range_gbnf(std::optional<int64_t> lo_bound, std::optional<int64_t> hi_bound) {
  const int64_t lo = std::max(lo_bound.value_or(-kMaxJsonInteger), -kMaxJsonInteger);
  const int64_t hi = std::min(hi_bound.value_or(kMaxJsonInteger), kMaxJsonInteger);
  SS_CHECK_LE(lo, hi);
  std::string alts;
  if (lo < 0) {
    // -x for x in [max(1, -hi), -lo]
    const int64_t abs_lo = std::max<int64_t>(1, hi < 0 ? -hi : 1);
    alts += "\"-\" (" + non_negative_range(abs_lo, -lo) + ")";
  }
  if (hi >= 0) {
    alts += std::string(alts.empty() ? "" : " | ") + "(" +
            non_negative_range(std::max<int64_t>(lo, 0), hi) + ")";
  }
  return "(" + alts + ")";
}

}  // namespace specstack::grammar

#include "grammar/schema_pattern.h"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "grammar/utf8_ranges.h"

namespace specstack::grammar {

namespace {

std::string class_char(uint32_t cp) {
  if (cp == ']' || cp == '\\' || cp == '-' || cp == '^' || cp == '"') {
    return std::string("\\") + static_cast<char>(cp);
  }
  if (cp < 0x20 || cp == 0x7F) return fmt::format("\\x{:02X}", cp);
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return fmt::format("\\U{:08X}", cp);
}

// A literal character as it appears inside a JSON string, as a GBNF literal.
std::string json_literal(uint32_t cp) {
  switch (cp) {
    case '"':
      return R"("\\\"")";
    case '\\':
      return R"("\\\\")";
    case '\n':
      return R"("\\n")";
    case '\r':
      return R"("\\r")";
    case '\t':
      return R"("\\t")";
    default:
      break;
  }
  if (cp < 0x20) return fmt::format("\"\\\\u{:04x}\"", cp);
  if (cp < 0x80)
    return fmt::format("\"{}\"", class_char(cp));  // class escapes are valid in literals
  return fmt::format("\"\\U{:08X}\"", cp);
}

class PatternParser {
 public:
  explicit PatternParser(std::string_view p) : p_(p) {}

  Result<std::string> parse() {
    if (p_.size() < 2 || p_.front() != '^' || p_.back() != '$') {
      return make_error("the pattern must be anchored with ^ at the start and $ at the end");
    }
    pos_ = 1;
    end_ = p_.size() - 1;
    auto expr = alternation(0);
    if (!expr.ok()) return expr;
    if (pos_ != end_) return fail("unbalanced )");
    return expr;
  }

 private:
  Error fail(std::string_view what) const {
    return errorf("{} at offset {} of the pattern", what, pos_);
  }
  bool more() const { return pos_ < end_; }
  char peek() const { return more() ? p_[pos_] : '\0'; }

  Result<std::string> alternation(int depth) {
    if (depth > 32) return fail("groups nested too deeply");
    std::string out;
    while (true) {
      auto seq = concat(depth);
      if (!seq.ok()) return seq;
      out += (out.empty() ? "" : " | ") + (seq->empty() ? std::string("\"\"") : *seq);
      if (!more() || peek() != '|') break;
      ++pos_;
    }
    return "(" + out + ")";
  }

  Result<std::string> concat(int depth) {
    std::string out;
    while (more() && peek() != '|' && peek() != ')') {
      auto a = atom(depth);
      if (!a.ok()) return a;
      std::string q;
      if (more()) {
        const char c = peek();
        if (c == '*' || c == '+' || c == '?') {
          q = c;
          ++pos_;
        } else if (c == '{') {
          auto bounds = repetition();
          if (!bounds.ok()) return bounds.error();
          q = *bounds;
        }
        if (!q.empty() && more() && peek() == '?') ++pos_;  // lazy: same language
      }
      out += (out.empty() ? "" : " ") + *a + q;
    }
    return out;
  }

  // {m}, {m,} or {m,n} with m <= n <= 1000, as GBNF text.
  Result<std::string> repetition() {
    const size_t close = p_.find('}', pos_);
    if (close == std::string_view::npos || close >= end_) return fail("unterminated {");
    const std::string_view inside = p_.substr(pos_ + 1, close - pos_ - 1);
    const size_t comma = inside.find(',');
    auto number = [](std::string_view digits) -> std::optional<uint32_t> {
      if (digits.empty() || digits.size() > 4) return std::nullopt;
      uint32_t v = 0;
      for (char d : digits) {
        if (!std::isdigit(static_cast<unsigned char>(d))) return std::nullopt;
        v = v * 10 + static_cast<uint32_t>(d - '0');
      }
      return v;
    };
    const auto min = number(inside.substr(0, comma));
    std::optional<uint32_t> max = min;
    if (comma != std::string_view::npos) {
      max = comma + 1 == inside.size() ? std::optional<uint32_t>(min)
                                       : number(inside.substr(comma + 1));
    }
    if (!min || !max || *max < *min || *max > 1000) {
      return fail("bad repetition (expected {m}, {m,} or {m,n} with m <= n <= 1000)");
    }
    pos_ = close + 1;
    return std::string(inside.data() - 1, inside.size() + 2);
  }

  Result<uint32_t> code_point() {
    const auto c = static_cast<unsigned char>(p_[pos_]);
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > end_) return fail("invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i)
      cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + size_t(i)]) & 0x3F);
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  // After a backslash: a class shorthand (its ranges in `ranges`, returns
  // true) or one escaped code point in `cp`.
  Result<bool> escape(std::vector<CodePointRange>& ranges, bool& negated, uint32_t& cp) {
    if (!more()) return fail("dangling backslash");
    const char e = p_[pos_++];
    negated = false;
    switch (e) {
      case 'D':
        negated = true;
        [[fallthrough]];
      case 'd':
        ranges = {{'0', '9'}};
        return true;
      case 'W':
        negated = true;
        [[fallthrough]];
      case 'w':
        ranges = {{'0', '9'}, {'A', 'Z'}, {'a', 'z'}, {'_', '_'}};
        return true;
      case 'S':
        negated = true;
        [[fallthrough]];
      case 's':
        ranges = {{' ', ' '}, {'\t', '\r'}};
        return true;
      case 'n':
        cp = '\n';
        return false;
      case 'r':
        cp = '\r';
        return false;
      case 't':
        cp = '\t';
        return false;
      default:
        break;
    }
    if (std::isalnum(static_cast<unsigned char>(e))) {
      --pos_;
      return fail(fmt::format("unsupported escape \\{}", e));
    }
    cp = static_cast<uint32_t>(static_cast<unsigned char>(e));
    return false;
  }

  // A class of code points as JSON string content: the characters JSON must
  // escape are left out (so a class never admits a bare quote).
  static std::string class_expr(std::vector<CodePointRange> ranges, bool negated) {
    ranges = normalize_ranges(std::move(ranges), negated);
    const std::vector<CodePointRange> excluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::string out = "[";
    for (CodePointRange r : ranges) {
      // Subtract the excluded ranges (sorted, disjoint) from r.
      for (const CodePointRange& x : excluded) {
        if (x.last < r.first || x.first > r.last) continue;
        if (x.first > r.first) {
          out += class_char(r.first);
          if (x.first - 1 > r.first) {
            out += '-';
            out += class_char(x.first - 1);
          }
        }
        r.first = x.last + 1;
        if (r.first > r.last) break;
      }
      if (r.first > r.last) continue;
      out += class_char(r.first);
      if (r.last > r.first) {
        out += '-';
        out += class_char(r.last);
      }
    }
    return out == "[" ? "[^\\x00-\\U0010FFFF]" : out + "]";
  }

  Result<std::string> atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (peek() == '?') {
        return fail("lookaround and named groups are not supported");
      }
      auto inner = alternation(depth + 1);
      if (!inner.ok()) return inner;
      if (peek() != ')') return fail("expected )");
      ++pos_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++pos_;
      return std::string("char");
    }
    if (c == '^' || c == '$') return fail("anchors are only supported at the ends");
    if (c == '*' || c == '+' || c == '?' || c == '{') return fail("nothing to repeat");
    if (c == '\\') {
      ++pos_;
      std::vector<CodePointRange> ranges;
      bool negated = false;
      uint32_t cp = 0;
      auto is_class = escape(ranges, negated, cp);
      if (!is_class.ok()) return is_class.error();
      if (*is_class) return class_expr(std::move(ranges), negated);
      return json_literal(cp);
    }
    auto cp = code_point();
    if (!cp.ok()) return cp.error();
    return json_literal(*cp);
  }

  Result<std::string> char_class() {
    ++pos_;  // [
    bool negated = false;
    if (peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    bool first = true;
    while (true) {
      if (!more()) return fail("unterminated [");
      if (peek() == ']' && !first) break;
      first = false;
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++pos_;
        std::vector<CodePointRange> shorthand;
        bool neg = false;
        auto is_class = escape(shorthand, neg, lo);
        if (!is_class.ok()) return is_class.error();
        if (*is_class) {
          if (neg) return fail("negated shorthands inside [] are not supported");
          ranges.insert(ranges.end(), shorthand.begin(), shorthand.end());
          continue;
        }
      } else {
        auto cp = code_point();
        if (!cp.ok()) return cp.error();
        lo = *cp;
      }
      uint32_t hi = lo;
      if (peek() == '-' && pos_ + 1 < end_ && p_[pos_ + 1] != ']') {
        ++pos_;
        if (peek() == '\\') {
          ++pos_;
          std::vector<CodePointRange> unused;
          bool neg = false;
          auto is_class = escape(unused, neg, hi);
          if (!is_class.ok()) return is_class.error();
          if (*is_class) return fail("a range cannot end in a class shorthand");
        } else {
          auto cp = code_point();
          if (!cp.ok()) return cp.error();
          hi = *cp;
        }
        if (hi < lo) return fail("backwards range");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;  // ]
    return class_expr(std::move(ranges), negated);
  }

  std::string_view p_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

Result<std::string> pattern_to_gbnf(std::string_view pattern) {
  return PatternParser(pattern).parse();
}

}  // namespace specstack::grammar

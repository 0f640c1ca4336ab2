#include "grammar/gbnf_parser.h"

#include <fmt/format.h>

#include <cctype>

namespace specstack::grammar {

namespace {

constexpr int kMaxNesting = 64;  // parentheses; deeper input is refused, not recursed into

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : text_(text), builder_(limits) {}

  Result<Grammar> parse() {
    skip_space();
    if (at_end()) return fail("the grammar is empty: expected a rule such as root ::= \"x\"");
    while (!at_end()) {
      if (Status s = parse_rule(); !s.ok()) return s.error();
      skip_space();
    }
    return std::move(builder_).finish("root");
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  std::string where(size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return fmt::format("line {}, column {}", line, column);
  }
  Error fail(std::string_view what) const {
    return errorf("grammar syntax error at {}: {}", where(pos_), what);
  }

  void skip_space() {
    while (!at_end()) {
      const char c = peek();
      if (c == '#') {
        while (!at_end() && peek() != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string_view parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // Whether a `name ::=` starts here (the end of the previous rule).
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  Status parse_rule() {
    const size_t start = pos_;
    const std::string_view name = parse_name();
    if (name.empty()) return fail("expected a rule name");
    rule_ = std::string(name);
    skip_space();
    if (text_.substr(pos_, 3) != "::=") return fail(fmt::format("expected ::= after '{}'", name));
    pos_ += 3;
    auto alternatives = parse_alternatives(0);
    if (!alternatives.ok()) return alternatives.error();
    if (!at_end() && !at_rule_start()) {
      return fail(fmt::format("unexpected '{}' (expected an element, |, or a new rule)", peek()));
    }
    return builder_.define(name, std::move(*alternatives), where(start));
  }

  Result<Alternatives> parse_alternatives(int depth) {
    if (depth > kMaxNesting) return fail("parentheses nested too deeply");
    Alternatives out;
    while (true) {
      auto seq = parse_sequence(depth);
      if (!seq.ok()) return seq.error();
      out.push_back(std::move(*seq));
      skip_space();
      if (peek() != '|') break;
      ++pos_;
    }
    return out;
  }

  Result<Sequence> parse_sequence(int depth) {
    Sequence seq;
    while (true) {
      skip_space();
      if (at_end() || peek() == '|' || peek() == ')' || at_rule_start()) return seq;
      const size_t atom_start = seq.size();
      if (Status s = parse_atom(depth, seq); !s.ok()) return s.error();
      skip_space();
      if (Status s = parse_postfix(atom_start, seq); !s.ok()) return s.error();
    }
  }

  Status parse_atom(int depth, Sequence& seq) {
    const char c = peek();
    if (c == '"') return parse_literal(seq);
    if (c == '[') return parse_class(seq);
    if (c == '.') {
      ++pos_;
      seq.push_back(builder_.char_class({}, /*negate=*/true, rule_));
      return {};
    }
    if (c == '(') {
      ++pos_;
      auto alternatives = parse_alternatives(depth + 1);
      if (!alternatives.ok()) return alternatives.error();
      if (peek() != ')') return fail("expected ) to close the group");
      ++pos_;
      // A group is spliced into the sequence when it is one plain sequence.
      if (alternatives->size() == 1) {
        seq.insert(seq.end(), (*alternatives)[0].begin(), (*alternatives)[0].end());
      } else {
        seq.push_back(builder_.group(std::move(*alternatives), rule_));
      }
      return {};
    }
    if (is_name_char(c)) {
      const size_t start = pos_;
      const std::string_view name = parse_name();
      seq.push_back({ElementKind::kElementRule, builder_.rule_ref(name, where(start))});
      return {};
    }
    return fail(
        fmt::format("unexpected '{}' (expected a literal, [class], rule name or (group))", c));
  }

  // *, +, ?, {m}, {m,}, {m,n} apply to the atom seq[atom_start, end).
  Status parse_postfix(size_t atom_start, Sequence& seq) {
    const char c = peek();
    if (c != '*' && c != '+' && c != '?' && c != '{') return {};
    if (seq.size() == atom_start) return fail("a repetition needs something to repeat");
    uint32_t min = 0;
    std::optional<uint32_t> max;
    ++pos_;
    if (c == '+') {
      min = 1;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      skip_space();
      auto m = parse_count();
      if (!m.ok()) return m.error();
      min = *m;
      max = min;
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        max.reset();
        if (peek() != '}') {
          auto n = parse_count();
          if (!n.ok()) return n.error();
          max = *n;
        }
      }
      skip_space();
      if (peek() != '}') return fail("expected } to close the repetition");
      ++pos_;
    }
    Sequence atom(seq.begin() + static_cast<std::ptrdiff_t>(atom_start), seq.end());
    seq.resize(atom_start);
    const Element x = builder_.group(Alternatives{std::move(atom)}, rule_);
    if (Status s = builder_.repeat(x, min, max, rule_, seq); !s.ok()) return fail(s.message());
    return {};
  }

  Result<uint32_t> parse_count() {
    const size_t start = pos_;
    uint64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      value = value * 10 + static_cast<uint64_t>(peek() - '0');
      if (value > 1'000'000) return fail("repetition count too large");
      ++pos_;
    }
    if (pos_ == start) return fail("expected a number in the repetition");
    return static_cast<uint32_t>(value);
  }

  // One (possibly escaped) code point of a literal or class.
  Result<uint32_t> parse_char() {
    if (at_end()) return fail("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'n':
          return uint32_t{'\n'};
        case 'r':
          return uint32_t{'\r'};
        case 't':
          return uint32_t{'\t'};
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '\'':
          return static_cast<uint32_t>(e);
        case 'x':
          return parse_hex(2);
        case 'u':
          return parse_hex(4);
        case 'U':
          return parse_hex(8);
        default:
          --pos_;
          return fail(fmt::format("unknown escape \\{}", e));
      }
    }
    // A raw UTF-8 code point of the grammar text.
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > text_.size()) {
      return fail("invalid UTF-8 in the grammar text");
    }
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return fail("invalid UTF-8 in the grammar text");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  Result<uint32_t> parse_hex(int digits) {
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      const int h = hex_value(peek());
      if (h < 0) return fail(fmt::format("expected {} hex digits in the escape", digits));
      value = value * 16 + static_cast<uint32_t>(h);
      ++pos_;
    }
    if (value > kMaxCodePoint) return fail("escape beyond U+10FFFF");
    return value;
  }

  Status parse_literal(Sequence& seq) {
    ++pos_;  // "
    std::vector<uint32_t> code_points;
    while (true) {
      if (at_end()) return fail("unterminated string literal");
      if (peek() == '"') break;
      auto cp = parse_char();
      if (!cp.ok()) return cp.error();
      code_points.push_back(*cp);
    }
    ++pos_;
    builder_.literal(code_points, seq);
    return {};
  }

  Status parse_class(Sequence& seq) {
    ++pos_;  // [
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<CodePointRange> ranges;
    while (true) {
      if (at_end()) return fail("unterminated character class");
      if (peek() == ']') break;
      auto first = parse_char();
      if (!first.ok()) return first.error();
      uint32_t last = *first;
      if (peek() == '-' && peek(1) != ']' && peek(1) != '\0') {
        ++pos_;
        auto end = parse_char();
        if (!end.ok()) return end.error();
        if (*end < *first) return fail("character range is backwards");
        last = *end;
      }
      ranges.push_back({*first, last});
    }
    ++pos_;
    seq.push_back(builder_.char_class(std::move(ranges), negate, rule_));
    return {};
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string rule_;  // the rule being parsed (names its helper rules)
  GrammarBuilder builder_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text, const GrammarLimits& limits) {
  return Parser(text, limits).parse();
}

}  // namespace specstack::grammar

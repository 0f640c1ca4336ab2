#include "chat/jinja_lexer.h"

#include <charconv>
#include <optional>

#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal body.
Result<std::string> unescape(std::string_view body, size_t offset) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n':
        break;  // line continuation
      case '\\':
      case '\'':
      case '"':
        out += c;
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n_hex = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
        uint32_t code = 0;
        for (size_t k = 0; k < n_hex; ++k) {
          const int h = i + 1 + k < body.size() ? hex_value(body[i + 1 + k]) : -1;
          if (h < 0) return errorf("truncated \\{} escape in string at offset {}", c, offset);
          code = code * 16 + static_cast<uint32_t>(h);
        }
        if (code > 0x10FFFF)
          return errorf("illegal Unicode character in string at offset {}", offset);
        append_utf8(out, code);
        i += n_hex;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t code = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            code = code * 8 + static_cast<uint32_t>(body[i + k] - '0');
            ++k;
          }
          append_utf8(out, code);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& options) : src_(source), options_(options) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      if (tag == std::string_view::npos) {
        emit_text(src_.substr(pos_), pos_);
        break;
      }
      SS_TRY(lex_tag(tag));
    }
    tokens_.push_back(Token{TokenKind::kEnd, src_.size(), "", 0, 0.0});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string_view::npos; p = src_.find('{', p + 1)) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
    }
    return std::string_view::npos;
  }

  bool starts_with(size_t p, std::string_view s) const { return src_.substr(p).starts_with(s); }

  // Bytes of the whitespace code point at p (Python's \s), or 0.
  size_t space_at(size_t p) const {
    const size_t n = std::min<size_t>(4, src_.size() - p);
    const std::u32string one = decode_utf8(src_.substr(p, n));
    if (one.empty() || !is_py_space(one[0])) return 0;
    std::string bytes;
    append_utf8(bytes, one[0]);
    return bytes.size();
  }

  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      const size_t n = space_at(p);
      if (n == 0) break;
      p += n;
    }
    return p;
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty())
      tokens_.push_back(Token{TokenKind::kText, offset, std::string(text), 0, 0.0});
  }

  // The text before a tag, after the tag's "-" (strip all whitespace) or
  // lstrip_blocks (strip the tag's own line indentation) took their share.
  std::string strip_before_tag(std::string_view text, char sign, bool block_like) const {
    if (sign == '-') return py_strip(text, std::nullopt, false, true);
    if (sign == '+' || !block_like || !options_.lstrip_blocks) return std::string(text);
    const size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
    if (line_start == 0 && !line_starting_) return std::string(text);
    if (text.find_first_not_of(" \t", line_start) != std::string_view::npos)
      return std::string(text);
    return std::string(text.substr(0, line_start));
  }

  // Consumes a tag end marker at pos_: "-" strips all following whitespace,
  // trim_blocks (blocks and comments only) drops one newline, "+" keeps all.
  void finish_tag_end(size_t marker_start, size_t marker_len, bool block_like) {
    pos_ = marker_start + marker_len;
    if (src_[marker_start] == '-') {
      pos_ = skip_space(pos_);
    } else if (src_[marker_start] != '+' && block_like && options_.trim_blocks &&
               pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = src_[pos_ - 1] == '\n';
  }

  Status lex_tag(size_t tag) {
    const char kind = src_[tag + 1];
    size_t after = tag + 2;
    const char sign =
        (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
    if (sign != 0) ++after;
    emit_text(strip_before_tag(src_.substr(pos_, tag - pos_), sign, kind != '{'), pos_);
    if (kind == '#') return lex_comment(tag, after);
    if (kind == '%' && try_raw(tag, after)) return lex_raw(tag);
    const bool is_block = kind == '%';
    tokens_.push_back(Token{is_block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, tag,
                            is_block ? "{%" : "{{", 0, 0.0});
    pos_ = after;
    return lex_tag_body(is_block, tag);
  }

  Status lex_comment(size_t tag, size_t after) {
    const size_t end = src_.find("#}", after);
    if (end == std::string_view::npos) return errorf("unclosed comment '{{#' at offset {}", tag);
    const bool has_sign = end > after && (src_[end - 1] == '-' || src_[end - 1] == '+');
    finish_tag_end(has_sign ? end - 1 : end, has_sign ? 3 : 2, true);
    return {};
  }

  // Matches "\s*raw\s*(-%}|%})" after "{%[-+]"; leaves pos_ after it.
  bool try_raw(size_t tag, size_t after) {
    size_t p = skip_space(after);
    if (!starts_with(p, "raw")) return false;
    p = skip_space(p + 3);
    if (starts_with(p, "-%}")) {
      pos_ = skip_space(p + 3);
    } else if (starts_with(p, "%}")) {
      pos_ = p + 2;
    } else {
      return false;
    }
    line_starting_ = src_[pos_ - 1] == '\n';
    return true;
  }

  Status lex_raw(size_t tag) {
    for (size_t p = src_.find("{%", pos_); p != std::string_view::npos;
         p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      const char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      if (sign != 0) ++q;
      q = skip_space(q);
      if (!starts_with(q, "endraw")) continue;
      q = skip_space(q + 6);
      size_t marker_len = 0;
      if (starts_with(q, "+%}") || starts_with(q, "-%}")) {
        marker_len = 3;
      } else if (starts_with(q, "%}")) {
        marker_len = 2;
      } else {
        continue;
      }
      emit_text(strip_before_tag(src_.substr(pos_, p - pos_), sign, true), pos_);
      finish_tag_end(q, marker_len, true);
      return {};
    }
    return errorf("unclosed '{{% raw %}}' at offset {}: expected '{{% endraw %}}'", tag);
  }

  Status lex_tag_body(bool is_block, size_t tag) {
    std::string brackets;
    while (true) {
      pos_ = skip_space(pos_);
      if (pos_ >= src_.size()) {
        return errorf("unclosed '{}' opened at offset {}", is_block ? "{%" : "{{", tag);
      }
      if (brackets.empty()) {
        const std::string_view close = is_block ? "%}" : "}}";
        const bool plus_allowed = is_block;
        size_t marker_len = 0;
        if (starts_with(pos_, close)) {
          marker_len = 2;
        } else if ((src_[pos_] == '-' || (plus_allowed && src_[pos_] == '+')) &&
                   starts_with(pos_ + 1, close)) {
          marker_len = 3;
        }
        if (marker_len > 0) {
          tokens_.push_back(Token{is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, pos_,
                                  std::string(close), 0, 0.0});
          finish_tag_end(pos_, marker_len, is_block);
          return {};
        }
      }
      SS_TRY(lex_token(brackets));
    }
  }

  Status lex_token(std::string& brackets) {
    const char c = src_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      const size_t start = pos_;
      while (pos_ < src_.size() && is_name_char(src_[pos_])) ++pos_;
      tokens_.push_back(
          Token{TokenKind::kName, start, std::string(src_.substr(start, pos_ - start)), 0, 0.0});
      return {};
    }
    if (c == '\'' || c == '"') return lex_string();
    static constexpr std::string_view kTwoCharOps[] = {"**", "//", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoCharOps) {
      if (starts_with(pos_, op)) {
        tokens_.push_back(Token{TokenKind::kOperator, pos_, std::string(op), 0, 0.0});
        pos_ += 2;
        return {};
      }
    }
    if (std::string_view("+-*/%~()[]{},.:|<>=;").find(c) == std::string_view::npos) {
      return errorf("unexpected character '{}' at offset {}", c, pos_);
    }
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      const char open = c == ')' ? '(' : (c == ']' ? '[' : '{');
      if (brackets.empty() || brackets.back() != open) {
        return errorf("unexpected '{}' at offset {}", c, pos_);
      }
      brackets.pop_back();
    }
    tokens_.push_back(Token{TokenKind::kOperator, pos_, std::string(1, c), 0, 0.0});
    ++pos_;
    return {};
  }

  size_t scan_digits(size_t p, int base) const {
    while (p < src_.size() &&
           (src_[p] == '_' || (hex_value(src_[p]) >= 0 && hex_value(src_[p]) < base))) {
      ++p;
    }
    return p;
  }

  Status lex_number() {
    const size_t start = pos_;
    int base = 10;
    size_t digits_start = start;
    if (src_[start] == '0' && start + 1 < src_.size()) {
      const char b = static_cast<char>(src_[start + 1] | 0x20);
      base = b == 'x' ? 16 : (b == 'o' ? 8 : (b == 'b' ? 2 : 10));
      if (base != 10) digits_start = start + 2;
    }
    size_t p = scan_digits(digits_start, base);
    bool is_float = false;
    // A number right after '.' is an index (x.0.1 is x[0][1]), never a float.
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    if (base == 10 && !after_dot) {
      if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
        p = scan_digits(p + 1, 10);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] | 0x20) == 'e') {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && is_digit(src_[q])) {
          p = scan_digits(q, 10);
          is_float = true;
        }
      }
    }
    std::string digits;
    for (char ch : src_.substr(digits_start, p - digits_start)) {
      if (ch != '_') digits += ch;
    }
    pos_ = p;
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInteger, start,
                std::string(src_.substr(start, p - start)), 0, 0.0};
    const char* first = digits.data();
    const char* last = digits.data() + digits.size();
    const auto result = is_float ? std::from_chars(first, last, token.float_value)
                                 : std::from_chars(first, last, token.int_value, base);
    if (digits.empty() || result.ec != std::errc() || result.ptr != last) {
      return errorf("invalid number literal '{}' at offset {}", token.text, start);
    }
    tokens_.push_back(std::move(token));
    return {};
  }

  Status lex_string() {
    const size_t start = pos_;
    const char quote = src_[start];
    size_t p = start + 1;
    while (p < src_.size() && src_[p] != quote) p += (src_[p] == '\\') ? 2 : 1;
    if (p >= src_.size()) return errorf("unterminated string literal at offset {}", start);
    SS_ASSIGN_OR_RETURN(std::string value, unescape(src_.substr(start + 1, p - start - 1), start));
    tokens_.push_back(Token{TokenKind::kString, start, std::move(value), 0, 0.0});
    pos_ = p + 1;
    return {};
  }

  std::string_view src_;
  LexOptions options_;
  size_t pos_ = 0;
  // jinja2 lstrips a block at the very start of the text only when the
  // previous tag's end consumed a newline (or the template just began).
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_template_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

Result<std::vector<Token>> lex_template(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace specstack::jinja

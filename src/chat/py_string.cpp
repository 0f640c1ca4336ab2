#include "chat/py_string.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace specstack::jinja {
namespace {

// Bytes that are not part of valid UTF-8 decode to this range (surrogateescape).
constexpr char32_t kEscapedByteBase = 0xDC00;

bool is_escaped_byte(char32_t c) {
  return c >= 0xDC80 && c <= 0xDCFF;
}

char32_t to_upper_cp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c == 0xB5) return 0x39C;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
    return (c & 1) ? c - 1 : c;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower_cp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) || (c >= 0x14A && c <= 0x177))
    return (c & 1) ? c : c + 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(char32_t c) {
  return to_upper_cp(c) != c || to_lower_cp(c) != c || c == 0xDF;
}

// Appends upper(c); the German sharp s is the one multi-letter case we keep.
void append_upper(std::u32string& out, char32_t c) {
  if (c == 0xDF) {
    out += U"SS";
  } else {
    out += to_upper_cp(c);
  }
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Code points Python's str.isprintable() rejects that chat text plausibly holds.
bool is_unprintable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return true;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F)) return true;
  if ((c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF) return true;
  if ((c >= 0xD800 && c <= 0xF8FF) || (c >= 0xFFF9 && c <= 0xFFFB)) return true;
  return c >= 0xF0000;
}

}  // namespace

void append_utf8(std::string& out, char32_t c) {
  if (is_escaped_byte(c)) {
    out += static_cast<char>(c - kEscapedByteBase);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int n_extra = 0;
    char32_t c = 0;
    char32_t min_value = 0;
    if (b0 < 0x80) {
      out += b0;
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      n_extra = 1, c = b0 & 0x1F, min_value = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      n_extra = 2, c = b0 & 0x0F, min_value = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      n_extra = 3, c = b0 & 0x07, min_value = 0x10000;
    }
    bool valid = n_extra > 0 && i + n_extra < s.size();
    for (int k = 1; valid && k <= n_extra; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) valid = false;
      c = (c << 6) | (b & 0x3F);
    }
    valid = valid && c >= min_value && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    if (valid) {
      out += c;
      i += n_extra + 1;
    } else {
      out += kEscapedByteBase + b0;
      ++i;
    }
  }
  return out;
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) append_utf8(out, c);
  return out;
}

size_t utf8_length(std::string_view text) {
  bool all_ascii = true;
  for (char ch : text) all_ascii = all_ascii && static_cast<unsigned char>(ch) < 0x80;
  return all_ascii ? text.size() : decode_utf8(text).size();
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::u32string s = decode_utf8(text);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_this = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_py_space(c);
  };
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end && strip_this(s[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_this(s[end - 1])) --end;
  }
  return encode_utf8(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t remaining = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    size_t i = 0;
    while (remaining-- > 0) {
      const size_t pos = text.find(*sep, i);
      if (pos == std::string_view::npos) break;
      out.emplace_back(text.substr(i, pos - i));
      i = pos + sep->size();
    }
    out.emplace_back(text.substr(i));
    return out;
  }
  const std::u32string s = decode_utf8(text);
  const std::u32string_view v(s);
  size_t i = 0;
  while (remaining-- > 0) {
    while (i < s.size() && is_py_space(s[i])) ++i;
    if (i == s.size()) break;
    const size_t j = i;
    while (i < s.size() && !is_py_space(s[i])) ++i;
    out.push_back(encode_utf8(v.substr(j, i - j)));
  }
  while (i < s.size() && is_py_space(s[i])) ++i;
  if (i < s.size()) out.push_back(encode_utf8(v.substr(i)));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t remaining = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    size_t end = text.size();
    while (remaining-- > 0 && end >= sep->size()) {
      const size_t pos = text.rfind(*sep, end - sep->size());
      if (pos == std::string_view::npos) break;
      out.emplace_back(text.substr(pos + sep->size(), end - pos - sep->size()));
      end = pos;
    }
    out.emplace_back(text.substr(0, end));
  } else {
    const std::u32string s = decode_utf8(text);
    const std::u32string_view v(s);
    size_t i = s.size();
    while (remaining-- > 0) {
      while (i > 0 && is_py_space(s[i - 1])) --i;
      if (i == 0) break;
      const size_t j = i;
      while (i > 0 && !is_py_space(s[i - 1])) --i;
      out.push_back(encode_utf8(v.substr(i, j - i)));
    }
    while (i > 0 && is_py_space(s[i - 1])) --i;
    if (i > 0) out.push_back(encode_utf8(v.substr(0, i)));
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view text) {
  const std::u32string s = decode_utf8(text);
  const std::u32string_view v(s);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = i;
    while (i < s.size() && !is_line_break(s[i])) ++i;
    const size_t eol = i;
    if (i < s.size()) i += (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ? 2 : 1;
    out.push_back(encode_utf8(v.substr(j, eol - j)));
  }
  return out;
}

std::string py_replace(std::string_view text, std::string_view old, std::string_view with,
                       int64_t count) {
  int64_t remaining = count < 0 ? INT64_MAX : count;
  std::string out;
  if (old.empty()) {
    // Python inserts `with` at every code point boundary, both ends included.
    for (size_t i = 0; i <= text.size(); ++i) {
      const bool boundary =
          i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80;
      if (boundary && remaining > 0) {
        out += with;
        --remaining;
      }
      if (i < text.size()) out += text[i];
    }
    return out;
  }
  size_t i = 0;
  while (remaining > 0) {
    const size_t pos = text.find(old, i);
    if (pos == std::string_view::npos) break;
    out.append(text.substr(i, pos - i));
    out.append(with);
    i = pos + old.size();
    --remaining;
  }
  out.append(text.substr(i));
  return out;
}

std::string py_upper(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode_utf8(text)) append_upper(out, c);
  return encode_utf8(out);
}

std::string py_lower(std::string_view text) {
  std::u32string s = decode_utf8(text);
  for (char32_t& c : s) c = to_lower_cp(c);
  return encode_utf8(s);
}

std::string py_capitalize(std::string_view text) {
  const std::u32string s = decode_utf8(text);
  std::u32string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 0) {
      append_upper(out, s[i]);
    } else {
      out += to_lower_cp(s[i]);
    }
  }
  return encode_utf8(out);
}

std::string py_title(std::string_view text) {
  std::u32string out;
  bool previous_is_cased = false;
  for (char32_t c : decode_utf8(text)) {
    if (previous_is_cased) {
      out += to_lower_cp(c);
    } else {
      append_upper(out, c);
    }
    previous_is_cased = is_cased(c);
  }
  return encode_utf8(out);
}

bool py_islower(std::string_view text) {
  bool any_cased = false;
  for (char32_t c : decode_utf8(text)) {
    if (to_lower_cp(c) != c) return false;
    any_cased = any_cased || is_cased(c);
  }
  return any_cased;
}

bool py_isupper(std::string_view text) {
  bool any_cased = false;
  for (char32_t c : decode_utf8(text)) {
    if (to_upper_cp(c) != c || c == 0xDF) return false;
    any_cased = any_cased || is_cased(c);
  }
  return any_cased;
}

std::string py_repr_string(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(text)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_unprintable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out += quote;
  return out;
}

std::string py_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest round-trip digits come from to_chars; the layout rules are
  // CPython's: exponent form iff decpt <= -4 or decpt > 16.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string_view sci(buf, result.ptr - buf);
  const size_t e_pos = sci.find('e');
  std::string_view mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string out;
  if (!mantissa.empty() && mantissa[0] == '-') {
    out += '-';
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char ch : mantissa) {
    if (ch != '.') digits += ch;
  }
  const int n_digits = static_cast<int>(digits.size());
  const int decpt = exponent + 1;
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n_digits > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt < n_digits) {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  } else {
    out += digits + std::string(decpt - n_digits, '0') + ".0";
  }
  return out;
}

}  // namespace specstack::jinja

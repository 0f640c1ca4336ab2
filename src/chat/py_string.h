// Python str semantics on UTF-8 byte strings: chat templates are rendered by
// Python's jinja2 in transformers, so strip/split/repr/float formatting must
// agree with CPython byte for byte. Strings are indexed by code point, as in
// Python; bytes that are not valid UTF-8 map to U+DC80..U+DCFF (like Python's
// surrogateescape) so that decode/encode round-trips any input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specstack::jinja {

std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);
void append_utf8(std::string& out, char32_t code_point);
// Number of code points (what Python's len() says).
size_t utf8_length(std::string_view text);

// str.isspace() for one code point.
bool is_py_space(char32_t c);

// str.strip/lstrip/rstrip; chars == nullopt strips whitespace.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                     bool right);
// str.split / str.rsplit; sep == nullopt splits on whitespace runs. maxsplit < 0 means no limit.
// An empty sep is the caller's error (Python raises ValueError).
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view text, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
// str.splitlines() (without keepends).
std::vector<std::string> py_splitlines(std::string_view text);
// str.replace; count < 0 replaces all.
std::string py_replace(std::string_view text, std::string_view old, std::string_view with,
                       int64_t count);

// Case mapping covers ASCII, Latin-1, Greek and Cyrillic (enough for role
// names and most prose; CPython's full Unicode tables are out of scope).
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_capitalize(std::string_view text);  // str.capitalize()
std::string py_title(std::string_view text);       // str.title()
bool py_islower(std::string_view text);
bool py_isupper(std::string_view text);

// repr(str): quotes and escapes like CPython.
std::string py_repr_string(std::string_view text);
// repr(float) / str(float): shortest round-trip digits, CPython layout.
std::string py_float_repr(double value);

}  // namespace specstack::jinja

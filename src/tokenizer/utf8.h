// UTF-8 helpers for the tokenizer. Everything after Tokenizer::encode's entry
// works on valid UTF-8 (invalid input is replaced first, as HF's &str API
// guarantees), so the decoders here trust their input unless said otherwise.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace specstack::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Byte length of the sequence a valid lead byte starts.
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point at s[i] of valid UTF-8 and advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);

bool is_valid_utf8(std::string_view bytes);
// Rust's String::from_utf8_lossy: each maximal invalid subsequence becomes one
// U+FFFD (an incomplete sequence at the end is one such subsequence).
std::string utf8_lossy(std::string_view bytes);

// Rust's char::is_whitespace (the Unicode White_Space property).
bool is_unicode_whitespace(char32_t cp);

}  // namespace specstack::tok

// GPT-2's bytes_to_unicode: every byte maps to a printable code point (the
// printable Latin-1 bytes to themselves, the other 68 to U+0100.. in order),
// so byte-level BPE vocabularies are plain strings.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace specstack::tok {

class ByteLevelMap {
 public:
  ByteLevelMap();
  // Appends the UTF-8 of each byte's stand-in character.
  void encode(std::string_view bytes, std::string& out) const;
  // The byte a stand-in character denotes, or -1 for any other character.
  int byte_of(char32_t cp) const { return cp < kCodePoints ? byte_of_[cp] : -1; }

 private:
  static constexpr char32_t kCodePoints = 0x144;  // stand-ins are all below U+0144
  std::array<std::array<char, 3>, 256> utf8_{};   // [len, b0, b1] per byte
  std::array<int16_t, kCodePoints> byte_of_{};
};

}  // namespace specstack::tok

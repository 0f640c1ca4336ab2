#include "tokenizer/byte_level.h"

#include "base/check.h"
#include "tokenizer/utf8.h"

namespace specstack::tok {

ByteLevelMap::ByteLevelMap() {
  byte_of_.fill(-1);
  char32_t next_extra = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
    SS_CHECK_LT(static_cast<uint32_t>(cp), static_cast<uint32_t>(kCodePoints));
    byte_of_[cp] = static_cast<int16_t>(b);
    std::string utf8;
    append_utf8(utf8, cp);
    utf8_[b] = {static_cast<char>(utf8.size()), utf8[0], utf8.size() > 1 ? utf8[1] : '\0'};
  }
}

void ByteLevelMap::encode(std::string_view bytes, std::string& out) const {
  out.reserve(out.size() + bytes.size() * 2);
  for (const char c : bytes) {
    const auto& u = utf8_[static_cast<unsigned char>(c)];
    out.append(&u[1], static_cast<size_t>(u[0]));
  }
}

}  // namespace specstack::tok

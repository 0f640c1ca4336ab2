// Unicode Normalization Form C (canonical decomposition, canonical ordering,
// canonical composition), used by Qwen's "NFC" normalizer.
#pragma once

#include <string>

namespace specstack::tok {

// s must be valid UTF-8. Full NFC with the tables of nfc_data.cpp (Unicode
// 14.0 from the build machine's Python; characters added after 14.0 pass
// through unchanged).
std::string to_nfc(const std::string& s);

}  // namespace specstack::tok

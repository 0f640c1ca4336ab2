// Lowering a set of code points to byte sequences: a character class of a
// grammar ([a-z], [^"\\], .) matches one UTF-8 encoded code point, which the
// byte-level matcher sees as 1-4 bytes. Each code point range splits into
// sequences of byte ranges (the algorithm of Rust regex-syntax's Utf8Sequences),
// so [\u0100-\uFFFF] becomes a handful of alternatives such as
// [\xC4-\xDF][\x80-\xBF]. Surrogates (U+D800..U+DFFF) are never encoded.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace specstack::grammar {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CodePointRange {
  uint32_t first = 0;
  uint32_t last = 0;  // inclusive
};

// One byte sequence: the i-th byte lies in [ranges[i].first, ranges[i].second].
using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Sorted, merged ranges; with `negate` the complement within [0, kMaxCodePoint].
std::vector<CodePointRange> normalize_ranges(std::vector<CodePointRange> ranges, bool negate);

// The byte sequences matching exactly the UTF-8 encodings of `range`.
std::vector<ByteRangeSequence> utf8_sequences(CodePointRange range);

// Appends the UTF-8 encoding of `cp` (which must be <= kMaxCodePoint).
void append_utf8(uint32_t cp, std::vector<uint8_t>& out);

}  // namespace specstack::grammar

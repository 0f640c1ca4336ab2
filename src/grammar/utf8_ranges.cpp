#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace specstack::grammar {

namespace {

constexpr uint32_t kSurrogateFirst = 0xD800;
constexpr uint32_t kSurrogateLast = 0xDFFF;

// Largest code point encoded in 1, 2, 3 bytes.
constexpr uint32_t kMaxOfLength[3] = {0x7F, 0x7FF, 0xFFFF};

int utf8_length(uint32_t cp) {
  if (cp <= 0x7F) return 1;
  if (cp <= 0x7FF) return 2;
  if (cp <= 0xFFFF) return 3;
  return 4;
}

}  // namespace

std::vector<CodePointRange> normalize_ranges(std::vector<CodePointRange> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end(),
            [](const CodePointRange& a, const CodePointRange& b) { return a.first < b.first; });
  std::vector<CodePointRange> merged;
  for (const CodePointRange& r : ranges) {
    if (r.first > r.last) continue;
    if (!merged.empty() && r.first <= merged.back().last + 1) {
      merged.back().last = std::max(merged.back().last, r.last);
    } else {
      merged.push_back(r);
    }
  }
  if (!negate) return merged;
  std::vector<CodePointRange> complement;
  uint32_t next = 0;
  for (const CodePointRange& r : merged) {
    if (r.first > next) complement.push_back({next, r.first - 1});
    next = r.last + 1;
  }
  if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
  return complement;
}

void append_utf8(uint32_t cp, std::vector<uint8_t>& out) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<uint8_t>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<uint8_t>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<uint8_t>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<uint8_t>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<uint8_t>(0x80 | (cp & 0x3F)));
  }
}

std::vector<ByteRangeSequence> utf8_sequences(CodePointRange range) {
  std::vector<ByteRangeSequence> out;
  std::vector<CodePointRange> todo = {range};
  while (!todo.empty()) {
    CodePointRange r = todo.back();
    todo.pop_back();
    if (r.first > r.last) continue;
    // Cut out the surrogates, then split where the encoded length changes.
    if (r.first <= kSurrogateLast && r.last >= kSurrogateFirst) {
      if (r.last > kSurrogateLast) todo.push_back({kSurrogateLast + 1, r.last});
      if (r.first < kSurrogateFirst) todo.push_back({r.first, kSurrogateFirst - 1});
      continue;
    }
    bool split = false;
    for (uint32_t max : kMaxOfLength) {
      if (r.first <= max && r.last > max) {
        todo.push_back({max + 1, r.last});
        todo.push_back({r.first, max});
        split = true;
        break;
      }
    }
    if (split) continue;
    // Same length: split until every continuation byte spans its whole
    // range below the first byte where the two ends differ.
    const int n = utf8_length(r.first);
    for (int i = 1; i < n && !split; ++i) {
      const uint32_t mask = (1u << (6 * i)) - 1;
      if ((r.first & ~mask) != (r.last & ~mask)) {
        if ((r.first & mask) != 0) {
          todo.push_back({(r.first | mask) + 1, r.last});
          todo.push_back({r.first, r.first | mask});
          split = true;
        } else if ((r.last & mask) != mask) {
          todo.push_back({r.last & ~mask, r.last});
          todo.push_back({r.first, (r.last & ~mask) - 1});
          split = true;
        }
      }
    }
    if (split) continue;
    std::vector<uint8_t> a, b;
    append_utf8(r.first, a);
    append_utf8(r.last, b);
    ByteRangeSequence seq;
    for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(a[i], b[i]);
    out.push_back(std::move(seq));
  }
  // Worklist order reversed the ranges: ascending is easier to read in tests.
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace specstack::grammar

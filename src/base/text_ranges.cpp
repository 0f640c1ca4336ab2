#include "base/text_ranges.h"

#include <algorithm>

namespace specstack {

void append_range(TextRanges& ranges, size_t begin, size_t end) {
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().end >= begin) {
    ranges.back().end = std::max(ranges.back().end, end);
    return;
  }
  ranges.push_back({begin, end});
}

void append_shifted(TextRanges& dst, std::span<const TextRange> src, size_t offset) {
  for (const TextRange& r : src) append_range(dst, r.begin + offset, r.end + offset);
}

TextRanges slice_ranges(std::span<const TextRange> ranges, size_t begin, size_t end) {
  TextRanges out;
  if (begin >= end) return out;
  // First range that ends after `begin` (ranges are sorted by both ends).
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](size_t pos, const TextRange& r) { return pos < r.end; });
  for (; it != ranges.end() && it->begin < end; ++it) {
    append_range(out, std::max(it->begin, begin) - begin, std::min(it->end, end) - begin);
  }
  return out;
}

bool overlaps_any(std::span<const TextRange> ranges, size_t begin, size_t end) {
  if (begin >= end) return false;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](size_t pos, const TextRange& r) { return pos < r.end; });
  return it != ranges.end() && it->begin < end;
}

bool ranges_valid(std::span<const TextRange> ranges, size_t size) {
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (ranges[i].begin >= ranges[i].end || ranges[i].end > size) return false;
    if (i > 0 && ranges[i - 1].end >= ranges[i].begin) return false;
  }
  return true;
}

}  // namespace specstack

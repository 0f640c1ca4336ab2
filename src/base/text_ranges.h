// Byte ranges of a string, kept sorted, disjoint and merged (no two ranges
// touch). The chat template marks which bytes of its rendering came from the
// request (user text), and the tokenizer then refuses to match special tokens
// there; these helpers keep such ranges exact while strings are cut and joined.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace specstack {

struct TextRange {
  size_t begin = 0;
  size_t end = 0;  // exclusive
  friend bool operator==(const TextRange&, const TextRange&) = default;
};

// Sorted, disjoint, non-adjacent, non-empty ranges. Empty (no allocation) for
// the common case of a string that holds no marked bytes.
using TextRanges = std::vector<TextRange>;

// Appends [begin, end) to `ranges`, whose last range must not end after
// `begin`; merges with the last range when they touch.
void append_range(TextRanges& ranges, size_t begin, size_t end);
// Appends `src` shifted by `offset` (src's ranges must start at or after the
// end of `dst`'s last range once shifted).
void append_shifted(TextRanges& dst, std::span<const TextRange> src, size_t offset);
// The part of `ranges` inside [begin, end), shifted so that begin becomes 0.
TextRanges slice_ranges(std::span<const TextRange> ranges, size_t begin, size_t end);
// Whether [begin, end) shares a byte with any range.
bool overlaps_any(std::span<const TextRange> ranges, size_t begin, size_t end);
// Whether the ranges are sorted, disjoint, non-adjacent, non-empty and inside
// [0, size) -- the invariant every function here keeps.
bool ranges_valid(std::span<const TextRange> ranges, size_t size);

}  // namespace specstack

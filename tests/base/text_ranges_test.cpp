// base/text_ranges.h: the sorted, merged byte ranges that mark user text in a
// chat rendering, and the operations that keep them exact.
#include "base/text_ranges.h"

#include <gtest/gtest.h>

namespace specstack {
namespace {

TEST(TextRanges, AppendMergesTouchingAndOverlappingRanges) {
  TextRanges r;
  append_range(r, 2, 4);
  append_range(r, 4, 6);  // touches: merged
  append_range(r, 5, 7);  // overlaps: merged
  append_range(r, 9, 9);  // empty: ignored
  append_range(r, 9, 10);
  EXPECT_EQ(r, (TextRanges{{2, 7}, {9, 10}}));
  EXPECT_TRUE(ranges_valid(r, 10));
  EXPECT_FALSE(ranges_valid(r, 9));
}

TEST(TextRanges, AppendShiftedJoinsAcrossTheSeam) {
  TextRanges dst = {{0, 3}};
  const TextRanges src = {{0, 2}, {4, 5}};
  append_shifted(dst, src, 3);
  EXPECT_EQ(dst, (TextRanges{{0, 5}, {7, 8}}));
}

TEST(TextRanges, SliceClipsAndRebases) {
  const TextRanges r = {{2, 5}, {8, 12}, {20, 21}};
  EXPECT_EQ(slice_ranges(r, 3, 10), (TextRanges{{0, 2}, {5, 7}}));
  EXPECT_EQ(slice_ranges(r, 5, 8), TextRanges{});
  EXPECT_EQ(slice_ranges(r, 0, 30), (TextRanges{{2, 5}, {8, 12}, {20, 21}}));
  EXPECT_EQ(slice_ranges(r, 21, 30), TextRanges{});
  EXPECT_EQ(slice_ranges(r, 4, 4), TextRanges{});
}

TEST(TextRanges, OverlapIsAboutSharedBytes) {
  const TextRanges r = {{2, 5}, {8, 12}};
  EXPECT_TRUE(overlaps_any(r, 4, 6));
  EXPECT_TRUE(overlaps_any(r, 0, 3));
  EXPECT_TRUE(overlaps_any(r, 6, 9));
  EXPECT_FALSE(overlaps_any(r, 5, 8));  // the gap between them
  EXPECT_FALSE(overlaps_any(r, 0, 2));  // ends where the first begins
  EXPECT_FALSE(overlaps_any(r, 12, 20));
  EXPECT_FALSE(overlaps_any(r, 3, 3));  // empty
  EXPECT_FALSE(overlaps_any({}, 0, 100));
}

TEST(TextRanges, ValidityRejectsUnsortedEmptyAndTouching) {
  EXPECT_TRUE(ranges_valid({}, 0));
  EXPECT_FALSE(ranges_valid(TextRanges{{3, 3}}, 5));
  EXPECT_FALSE(ranges_valid(TextRanges{{3, 4}, {1, 2}}, 5));
  EXPECT_FALSE(ranges_valid(TextRanges{{1, 2}, {2, 3}}, 5));
}

}  // namespace
}  // namespace specstack

// HF's SplitDelimiterBehavior: how the matches of a split pattern and the text
// between them become pieces.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace specstack::tok {

enum class SplitBehavior {
  kRemoved,             // drop the matches
  kIsolated,            // every match is its own piece
  kMergedWithPrevious,  // a match joins the piece before it
  kMergedWithNext,      // a match joins the piece after it
  kContiguous,          // consecutive matches form one piece
};

Result<SplitBehavior> parse_split_behavior(const std::string& name, const std::string& path);

struct MarkedRange {
  size_t start;
  size_t end;
  bool is_match;
};

// Covers [0, length) with the matches and the gaps between them, in order;
// invert swaps which ranges count as matches.
std::vector<MarkedRange> mark_matches(const std::vector<std::pair<size_t, size_t>>& matches,
                                      size_t length, bool invert);

// The resulting pieces as [start, end) ranges (possibly empty ones, which the
// caller drops).
std::vector<std::pair<size_t, size_t>> apply_split_behavior(const std::vector<MarkedRange>& ranges,
                                                            SplitBehavior behavior);

}  // namespace specstack::tok

#include "tokenizer/split_behavior.h"

#include <algorithm>

namespace specstack::tok {

Result<SplitBehavior> parse_split_behavior(const std::string& name, const std::string& path) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return errorf("{}: unknown split behavior \"{}\"", path, name);
}

std::vector<MarkedRange> mark_matches(const std::vector<std::pair<size_t, size_t>>& matches,
                                      size_t length, bool invert) {
  std::vector<MarkedRange> ranges;
  if (length == 0) return {{0, 0, invert}};
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    if (prev != start) ranges.push_back({prev, start, invert});
    ranges.push_back({start, end, !invert});
    prev = end;
  }
  if (prev != length) ranges.push_back({prev, length, invert});
  return ranges;
}

std::vector<std::pair<size_t, size_t>> apply_split_behavior(const std::vector<MarkedRange>& ranges,
                                                            SplitBehavior behavior) {
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(ranges.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const MarkedRange& r : ranges) out.emplace_back(r.start, r.end);
      break;
    case SplitBehavior::kRemoved:
      for (const MarkedRange& r : ranges) {
        if (!r.is_match) out.emplace_back(r.start, r.end);
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const MarkedRange& r : ranges) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().second = r.end;
        } else {
          out.emplace_back(r.start, r.end);
        }
        previous_match = r.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const MarkedRange& r : ranges) {
        if (r.is_match == previous_match && !out.empty()) {
          out.back().second = r.end;
        } else {
          out.emplace_back(r.start, r.end);
        }
        previous_match = r.is_match;
      }
      break;
  }
  return out;
}

}  // namespace specstack::tok

#include "specprefill/selector.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"

namespace specstack {
namespace {

Status check_options(std::span<const float> importance, const SelectionOptions& options) {
  if (importance.empty()) return errorf("select: no token importance to select from");
  if (!(options.keep_pct > 0.0 && options.keep_pct <= 1.0)) {
    return errorf("select: keep_pct {} must be in (0, 1]", options.keep_pct);
  }
  if (options.chunk < 1) return errorf("select: chunk {} must be >= 1", options.chunk);
  if (options.force_recent_window < 0) {
    return errorf("select: force_recent_window {} must be >= 0", options.force_recent_window);
  }
  if (options.position_offset < 0) {
    return errorf("select: position_offset {} must be >= 0", options.position_offset);
  }
  const int64_t last = options.position_offset + static_cast<int64_t>(importance.size()) - 1;
  if (last > std::numeric_limits<int32_t>::max()) {
    return errorf("select: position {} does not fit in int32", last);
  }
  return Status::ok_status();
}

}  // namespace

int32_t budget_chunks(double keep_pct, int64_t n_chunks) {
  SS_CHECK(keep_pct > 0.0 && keep_pct <= 1.0);
  SS_CHECK_GE(n_chunks, 1);
  const double product = std::round(keep_pct * static_cast<double>(n_chunks) * 1e9) / 1e9;
  const int64_t n = static_cast<int64_t>(std::ceil(product));
  return static_cast<int32_t>(std::clamp<int64_t>(n, 1, n_chunks));
}

Result<SelectionResult> select_chunks(std::span<const float> importance,
                                      const SelectionOptions& options) {
  SS_TRY(check_options(importance, options));
  const int64_t n_tokens = static_cast<int64_t>(importance.size());
  const int64_t n_chunks = (n_tokens + options.chunk - 1) / options.chunk;

  SelectionResult result;
  result.chunk_scores.resize(static_cast<size_t>(n_chunks));
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t begin = c * options.chunk;
    const int64_t end = std::min(n_tokens, begin + options.chunk);
    double sum = 0.0;
    for (int64_t j = begin; j < end; ++j) sum += importance[static_cast<size_t>(j)];
    const float score = static_cast<float>(sum / static_cast<double>(end - begin));
    // A NaN would break the strict ordering the top-k sort relies on.
    if (!std::isfinite(score)) {
      return errorf("select: chunk {} (tokens [{}, {})) has a non-finite score", c, begin, end);
    }
    result.chunk_scores[static_cast<size_t>(c)] = score;
  }

  result.n_budget_chunks = budget_chunks(options.keep_pct, n_chunks);
  std::vector<int32_t> order(static_cast<size_t>(n_chunks));
  std::iota(order.begin(), order.end(), 0);
  // Higher score first; equal scores keep the lower chunk index.
  std::partial_sort(order.begin(), order.begin() + result.n_budget_chunks, order.end(),
                    [&](int32_t a, int32_t b) {
                      const float sa = result.chunk_scores[static_cast<size_t>(a)];
                      const float sb = result.chunk_scores[static_cast<size_t>(b)];
                      return sa != sb ? sa > sb : a < b;
                    });
  std::vector<uint8_t> keep(static_cast<size_t>(n_chunks), 0);
  for (int32_t i = 0; i < result.n_budget_chunks; ++i) keep[static_cast<size_t>(order[i])] = 1;
  if (options.force_first_last) {
    keep.front() = 1;
    keep.back() = 1;
  }
  if (options.force_recent_window > 0) {
    const int64_t first_recent = std::max<int64_t>(0, n_tokens - options.force_recent_window);
    for (int64_t c = first_recent / options.chunk; c < n_chunks; ++c) {
      keep[static_cast<size_t>(c)] = 1;
    }
  }

  for (int64_t c = 0; c < n_chunks; ++c) {
    if (!keep[static_cast<size_t>(c)]) continue;
    result.kept_chunks.push_back(static_cast<int32_t>(c));
    const int64_t end = std::min(n_tokens, (c + 1) * options.chunk);
    for (int64_t j = c * options.chunk; j < end; ++j) {
      result.kept_positions.push_back(static_cast<int32_t>(j + options.position_offset));
    }
  }
  return result;
}

}  // namespace specstack

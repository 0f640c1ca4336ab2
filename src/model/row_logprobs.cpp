#include "model/row_logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace specstack {

RowLogprobs row_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top_n) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) max_logit = std::max(max_logit, logits[i]);
  }
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) total += std::exp(static_cast<double>(logits[i]) - max_logit);
  }
  const float log_total = static_cast<float>(std::log(total)) + max_logit;
  auto logprob = [&](int32_t id) {
    return std::isnan(logits[id]) ? -std::numeric_limits<float>::infinity()
                                  : logits[id] - log_total;
  };
  RowLogprobs out;
  out.logprob = logprob(token);
  if (top_n > 0) {
    const auto n = static_cast<size_t>(std::min<int64_t>(top_n, vocab));
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                      [&](int32_t a, int32_t b) {
                        const float la = logprob(a), lb = logprob(b);
                        return la > lb || (la == lb && a < b);
                      });
    for (size_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logprob(ids[i]));
  }
  return out;
}

}  // namespace specstack

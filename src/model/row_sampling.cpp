#include "model/row_sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace specstack {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

int32_t sample_row(const float* logits, int64_t vocab, const RowSampling& sampling,
                   const LogitMasks* masks, size_t row) {
  // l [vocab]: the logits as the rule reads them.
  std::vector<float> l(static_cast<size_t>(vocab));
  int32_t arg = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = logits[i];
    const bool admitted = masks == nullptr || masks->admits(row, static_cast<int32_t>(i));
    l[size_t(i)] = !admitted || std::isnan(v) ? -kInf : v;
    if (l[size_t(i)] > l[size_t(arg)]) arg = static_cast<int32_t>(i);
  }
  const float m = l[size_t(arg)];
  if (!(sampling.temperature > 0.0f) || m == -kInf) return arg;

  const float inv_t = 1.0f / sampling.temperature;
  const auto weight = [&](float v) -> double {
    return v == m ? 1.0 : static_cast<double>(std::exp((v - m) * inv_t));
  };
  float cut = -kInf;  // kept: l >= cut
  if (sampling.top_k > 0 && sampling.top_k < vocab) {
    std::vector<float> values = l;
    const auto kth = values.begin() + (sampling.top_k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
    cut = *kth;
  }
  if (sampling.top_p < 1.0f) {
    // Distinct kept values from the top; the cut is the first whose
    // cumulative mass reaches top_p of the top-k mass.
    std::vector<float> values;
    double z = 0.0;
    for (float v : l) {
      if (v < cut) continue;
      values.push_back(v);
      z += weight(v);
    }
    std::sort(values.begin(), values.end(), std::greater<float>());
    const double needed = static_cast<double>(sampling.top_p) * z;
    double cumulative = 0.0;
    for (size_t g = 0; g < values.size();) {
      const float value = values[g];
      while (g < values.size() && values[g] == value) cumulative += weight(values[g++]);
      if (cumulative >= needed) {
        cut = value;
        break;
      }
    }
  }
  const double min_weight = sampling.min_p;
  const auto kept_weight = [&](float v) {
    if (v < cut) return 0.0;
    const double w = weight(v);
    return w < min_weight ? 0.0 : w;
  };
  double total = 0.0;
  for (float v : l) total += kept_weight(v);
  const double target = static_cast<double>(sampling.uniform) * total;
  double cumulative = 0.0;
  int32_t last = arg;
  for (int64_t i = 0; i < vocab; ++i) {
    const double w = kept_weight(l[size_t(i)]);
    if (w == 0.0) continue;
    cumulative += w;
    last = static_cast<int32_t>(i);
    if (cumulative > target) return last;
  }
  return last;  // the target rounded up to the total
}

}  // namespace specstack

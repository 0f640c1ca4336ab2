#include "model/row_sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace specstack {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The rule's reading of a row: l (NaN and masked tokens as -inf), its argmax,
// and each token's kept weight (see sample_row).
class RowRule {
 public:
  RowRule(const float* logits, int64_t vocab, const RowSampling& sampling, const LogitMasks* masks,
          size_t row)
      : l_(static_cast<size_t>(vocab)) {
    for (int64_t i = 0; i < vocab; ++i) {
      const float v = logits[i];
      const bool admitted = masks == nullptr || masks->admits(row, static_cast<int32_t>(i));
      l_[size_t(i)] = !admitted || std::isnan(v) ? -kInf : v;
      if (l_[size_t(i)] > l_[size_t(arg_)]) arg_ = static_cast<int32_t>(i);
    }
    m_ = l_[size_t(arg_)];
    greedy_ = !(sampling.temperature > 0.0f) || m_ == -kInf;
    if (greedy_) return;
    inv_t_ = 1.0f / sampling.temperature;
    if (sampling.top_k > 0 && sampling.top_k < vocab) {
      std::vector<float> values = l_;
      const auto kth = values.begin() + (sampling.top_k - 1);
      std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
      cut_ = *kth;
    }
    if (sampling.top_p < 1.0f) {
      // Distinct kept values from the top; the cut is the first whose
      // cumulative mass reaches top_p of the top-k mass.
      std::vector<float> values;
      double z = 0.0;
      for (float v : l_) {
        if (v < cut_) continue;
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
          cut_ = value;
          break;
        }
      }
    }
    min_weight_ = sampling.min_p;
  }

  bool greedy() const { return greedy_; }
  int32_t arg() const { return arg_; }
  int64_t vocab() const { return static_cast<int64_t>(l_.size()); }
  // Token i's weight in the draw (0: not kept).
  double kept_weight(int64_t i) const {
    const float v = l_[size_t(i)];
    if (v < cut_) return 0.0;
    const double w = weight(v);
    return w < min_weight_ ? 0.0 : w;
  }

 private:
  double weight(float v) const {
    return v == m_ ? 1.0 : static_cast<double>(std::exp((v - m_) * inv_t_));
  }

  std::vector<float> l_;  // [vocab]
  int32_t arg_ = 0;
  float m_ = -kInf;
  bool greedy_ = true;
  float inv_t_ = 1.0f;
  float cut_ = -kInf;  // kept: l >= cut
  double min_weight_ = 0.0;
};

}  // namespace

int32_t sample_row(const float* logits, int64_t vocab, const RowSampling& sampling,
                   const LogitMasks* masks, size_t row) {
  const RowRule rule(logits, vocab, sampling, masks, row);
  if (rule.greedy()) return rule.arg();
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += rule.kept_weight(i);
  const double target = static_cast<double>(sampling.uniform) * total;
  double cumulative = 0.0;
  int32_t last = rule.arg();
  for (int64_t i = 0; i < vocab; ++i) {
    const double w = rule.kept_weight(i);
    if (w == 0.0) continue;
    cumulative += w;
    last = static_cast<int32_t>(i);
    if (cumulative > target) return last;
  }
  return last;  // the target rounded up to the total
}

void row_distribution(const float* logits, int64_t vocab, const RowSampling& sampling,
                      const LogitMasks* masks, size_t row, std::vector<float>& probs) {
  const RowRule rule(logits, vocab, sampling, masks, row);
  probs.assign(static_cast<size_t>(vocab), 0.0f);
  if (rule.greedy()) {
    probs[size_t(rule.arg())] = 1.0f;
    return;
  }
  double total = 0.0;
  for (int64_t i = 0; i < vocab; ++i) total += rule.kept_weight(i);
  for (int64_t i = 0; i < vocab; ++i)
    probs[size_t(i)] = static_cast<float>(rule.kept_weight(i) / total);
}

}  // namespace specstack

// A fixed-bucket latency histogram (Prometheus style), for TTFT and
// inter-token latency. Not thread-safe: the engine loop owns it and hands out
// snapshots under its metrics lock.
#pragma once

#include <algorithm>
#include <vector>

#include "engine/engine_api.h"

namespace specstack {

class LatencyHistogram {
 public:
  explicit LatencyHistogram(std::vector<double> bounds)
      : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

  void observe(double seconds) {
    const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), seconds);
    ++counts_[static_cast<size_t>(it - bounds_.begin())];
    sum_ += seconds;
    ++count_;
  }

  HistogramSnapshot snapshot() const {
    HistogramSnapshot out;
    out.bounds = bounds_;
    int64_t running = 0;
    for (int64_t c : counts_) out.counts.push_back(running += c);
    out.sum = sum_;
    out.count = count_;
    return out;
  }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); last = above every bound
  double sum_ = 0;
  int64_t count_ = 0;
};

}  // namespace specstack

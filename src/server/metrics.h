// GET /metrics: Prometheus text exposition (format 0.0.4) of the engine's
// EngineMetrics (speculative prefill and decoding series included, zero
// without a draft) plus the server's own counters (responses by status code) and
// a recent-throughput gauge. Tokens/s can also be derived with rate() over the
// *_tokens_total counters.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_api.h"

namespace specstack {

// HTTP responses by status code; written by every worker thread.
class HttpCounters {
 public:
  void record(int status);
  std::vector<std::pair<int, int64_t>> snapshot() const;  // ascending status code

 private:
  mutable std::mutex mutex_;
  std::map<int, int64_t> by_status_;
};

struct ThroughputRates {
  double prompt_tokens_per_s = 0;
  double generation_tokens_per_s = 0;
};

// Tokens/s over a sliding window, from samples of the engine's cumulative
// counters. Fed by each /metrics scrape and by the periodic log line, so the
// window is as fine as those samples.
class ThroughputMeter {
 public:
  explicit ThroughputMeter(std::chrono::milliseconds window = std::chrono::seconds(10))
      : window_(window) {}
  // Records the totals at `now` and returns the rates over the window (the
  // oldest sample in it, or the last one before it, to now). 0 with no
  // earlier sample.
  ThroughputRates observe(std::chrono::steady_clock::time_point now, int64_t prompt_tokens_total,
                          int64_t generation_tokens_total);

 private:
  struct Sample {
    std::chrono::steady_clock::time_point time;
    int64_t prompt_tokens = 0;
    int64_t generation_tokens = 0;
  };
  std::chrono::milliseconds window_;
  std::mutex mutex_;
  std::deque<Sample> samples_;
};

// Memory gauges, read at scrape time. A negative value is unknown and is
// left out of the exposition rather than shown as a number.
struct MemoryGauges {
  int64_t process_resident_bytes = -1;  // the server's RSS
  int64_t heap_in_use_bytes = -1;       // malloc: live allocations
  int64_t heap_held_bytes = -1;         // malloc: taken from the system
  MemoryMetrics engine;
};

// HTTP connections, read at scrape time; negative: unknown (left out).
struct ConnectionGauges {
  int64_t open = -1;  // open now, idle ones included
  int64_t idle = -1;  // of those, waiting in the idle stage (no request, or its head arriving)
};

// The whole exposition text.
std::string render_prometheus(const EngineMetrics& engine,
                              const std::vector<std::pair<int, int64_t>>& http_responses,
                              const ThroughputRates& rates, const MemoryGauges& memory = {},
                              const ConnectionGauges& connections = {});

}  // namespace specstack

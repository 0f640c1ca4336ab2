// The /metrics text parsed back: every family has HELP and TYPE, values match
// the EngineMetrics they came from, histograms are cumulative and end in +Inf.
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "server/process_memory.h"

namespace specstack {
namespace {

struct Exposition {
  std::map<std::string, double> samples;  // "name{labels}" -> value
  std::map<std::string, std::string> types;
  std::set<std::string> helps;
};

// A strict reader of the subset of the text format the server writes.
Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      const std::string rest = line.substr(7);
      out.helps.insert(rest.substr(0, rest.find(' ')));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream fields(line.substr(7));
      std::string name, type;
      fields >> name >> type;
      EXPECT_TRUE(type == "gauge" || type == "counter" || type == "histogram") << line;
      out.types[name] = type;
      continue;
    }
    const size_t space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    const std::string key = line.substr(0, space);
    size_t used = 0;
    const double value = std::stod(line.substr(space + 1), &used);
    EXPECT_EQ(used, line.size() - space - 1) << line;
    EXPECT_EQ(out.samples.count(key), 0u) << "duplicate sample " << key;
    out.samples[key] = value;
    // Every sample belongs to a family declared before it.
    std::string family = key.substr(0, key.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s = suffix;
      if (!out.types.count(family) && family.size() > s.size() &&
          family.compare(family.size() - s.size(), s.size(), s) == 0) {
        family.erase(family.size() - s.size());
      }
    }
    EXPECT_TRUE(out.types.count(family)) << "no TYPE for " << key;
    EXPECT_TRUE(out.helps.count(family)) << "no HELP for " << key;
  }
  return out;
}

EngineMetrics sample_metrics() {
  EngineMetrics m;
  m.n_waiting = 3;
  m.n_running = 5;
  m.kv_blocks_total = 200;
  m.kv_blocks_free = 150;
  m.kv_blocks_cached = 40;
  m.prefix_cache_queried_tokens = 1000;
  m.prefix_cache_hit_tokens = 250;
  m.prompt_tokens_total = 5000;
  m.generation_tokens_total = 1234;
  m.requests_finished_total = 17;
  m.requests_aborted_total = 2;
  m.preemptions_total = 1;
  m.steps_total = 99;
  m.step_seconds_total = 2.5;
  m.forward_seconds_total = 2.0;
  m.grammar_mask_seconds_total = 0.25;
  m.grammar_accept_seconds_total = 0.125;
  m.time_to_first_token.bounds = {0.01, 0.1, 1.0};
  m.time_to_first_token.counts = {1, 4, 6, 7};
  m.time_to_first_token.sum = 3.5;
  m.time_to_first_token.count = 7;
  m.inter_token_latency.bounds = {0.005, 0.05};
  m.inter_token_latency.counts = {100, 900, 1000};
  m.inter_token_latency.sum = 20.25;
  m.inter_token_latency.count = 1000;
  return m;
}

TEST(Metrics, ParsesBackToTheEngineValues) {
  const std::string text = render_prometheus(sample_metrics(), {{200, 12}, {400, 3}, {429, 1}},
                                             ThroughputRates{10, 20.5});
  const Exposition exp = parse_exposition(text);
  const auto& s = exp.samples;
  EXPECT_EQ(s.at("specstack_num_requests_waiting"), 3);
  EXPECT_EQ(s.at("specstack_num_requests_running"), 5);
  EXPECT_EQ(s.at("specstack_kv_blocks_total"), 200);
  EXPECT_EQ(s.at("specstack_kv_blocks_free"), 150);
  EXPECT_EQ(s.at("specstack_kv_blocks_cached"), 40);
  EXPECT_DOUBLE_EQ(s.at("specstack_kv_cache_usage_ratio"), 0.25);
  EXPECT_EQ(s.at("specstack_prefix_cache_queries_total"), 1000);
  EXPECT_EQ(s.at("specstack_prefix_cache_hits_total"), 250);
  EXPECT_DOUBLE_EQ(s.at("specstack_prefix_cache_hit_rate"), 0.25);
  EXPECT_EQ(s.at("specstack_prompt_tokens_total"), 5000);
  EXPECT_EQ(s.at("specstack_generation_tokens_total"), 1234);
  EXPECT_EQ(s.at("specstack_requests_finished_total"), 17);
  EXPECT_EQ(s.at("specstack_preemptions_total"), 1);
  EXPECT_DOUBLE_EQ(s.at("specstack_engine_step_seconds_total"), 2.5);
  EXPECT_DOUBLE_EQ(s.at("specstack_engine_forward_seconds_total"), 2.0);
  EXPECT_DOUBLE_EQ(s.at("specstack_grammar_mask_seconds_total"), 0.25);
  EXPECT_DOUBLE_EQ(s.at("specstack_grammar_accept_seconds_total"), 0.125);
  EXPECT_DOUBLE_EQ(s.at("specstack_avg_generation_throughput_tokens_per_second"), 20.5);
  EXPECT_EQ(s.at("specstack_http_requests_total{code=\"200\"}"), 12);
  EXPECT_EQ(s.at("specstack_http_requests_total{code=\"429\"}"), 1);
  EXPECT_EQ(exp.types.at("specstack_http_requests_total"), "counter");
  EXPECT_EQ(exp.types.at("specstack_num_requests_waiting"), "gauge");

  EXPECT_EQ(exp.types.at("specstack_time_to_first_token_seconds"), "histogram");
  EXPECT_EQ(s.at("specstack_time_to_first_token_seconds_bucket{le=\"0.01\"}"), 1);
  EXPECT_EQ(s.at("specstack_time_to_first_token_seconds_bucket{le=\"0.1\"}"), 4);
  EXPECT_EQ(s.at("specstack_time_to_first_token_seconds_bucket{le=\"1\"}"), 6);
  EXPECT_EQ(s.at("specstack_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 7);
  EXPECT_EQ(s.at("specstack_time_to_first_token_seconds_count"), 7);
  EXPECT_DOUBLE_EQ(s.at("specstack_time_to_first_token_seconds_sum"), 3.5);
  EXPECT_EQ(s.at("specstack_inter_token_latency_seconds_bucket{le=\"0.005\"}"), 100);
  EXPECT_EQ(s.at("specstack_inter_token_latency_seconds_bucket{le=\"+Inf\"}"), 1000);
  EXPECT_DOUBLE_EQ(s.at("specstack_inter_token_latency_seconds_sum"), 20.25);
}

TEST(Metrics, EmptyEngineStillExposesEveryFamily) {
  const Exposition exp = parse_exposition(render_prometheus(EngineMetrics{}, {}, {}));
  EXPECT_EQ(exp.samples.at("specstack_kv_cache_usage_ratio"), 0);
  EXPECT_EQ(exp.samples.at("specstack_prefix_cache_hit_rate"), 0);
  EXPECT_EQ(exp.samples.at("specstack_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), 0);
  EXPECT_EQ(exp.samples.at("specstack_inter_token_latency_seconds_count"), 0);
  EXPECT_TRUE(exp.types.count("specstack_http_requests_total"));
}

TEST(Metrics, MemoryGaugesAppearWhenKnown) {
  MemoryGauges memory;
  memory.process_resident_bytes = 123 << 20;
  memory.engine.kv_cache_bytes = 64 << 20;
  memory.engine.kv_cache_resident_bytes = 3 << 20;
  const Exposition exp = parse_exposition(render_prometheus(EngineMetrics{}, {}, {}, memory));
  EXPECT_EQ(exp.samples.at("process_resident_memory_bytes"), 123 << 20);
  EXPECT_EQ(exp.types.at("process_resident_memory_bytes"), "gauge");
  EXPECT_EQ(exp.samples.at("specstack_kv_cache_bytes"), 64 << 20);
  EXPECT_EQ(exp.samples.at("specstack_kv_cache_resident_bytes"), 3 << 20);
  // No GPU: no device gauge rather than a made-up number.
  EXPECT_FALSE(exp.samples.count("specstack_device_memory_used_bytes"));
  memory.engine.device_memory_used_bytes = int64_t{5} << 30;
  const Exposition gpu = parse_exposition(render_prometheus(EngineMetrics{}, {}, {}, memory));
  EXPECT_EQ(gpu.samples.at("specstack_device_memory_used_bytes"), double(int64_t{5} << 30));
  // Unknown RSS (not Linux) is left out too.
  const Exposition bare = parse_exposition(render_prometheus(EngineMetrics{}, {}, {}));
  EXPECT_FALSE(bare.samples.count("process_resident_memory_bytes"));
}

TEST(Metrics, ConnectionGaugesAppearWhenKnown) {
  ConnectionGauges connections;
  connections.open = 7;
  connections.idle = 5;
  const Exposition exp =
      parse_exposition(render_prometheus(EngineMetrics{}, {}, {}, {}, connections));
  EXPECT_EQ(exp.samples.at("specstack_http_connections_open"), 7);
  EXPECT_EQ(exp.samples.at("specstack_http_connections_idle"), 5);
  EXPECT_EQ(exp.types.at("specstack_http_connections_idle"), "gauge");
  const Exposition bare = parse_exposition(render_prometheus(EngineMetrics{}, {}, {}));
  EXPECT_FALSE(bare.samples.count("specstack_http_connections_open"));
}

TEST(Metrics, ProcessResidentBytesIsThisProcess) {
  const int64_t before = process_resident_bytes();
  ASSERT_GT(before, 0);
  // Touching 64 MiB shows up in the reading.
  std::vector<char> block(64 << 20);
  for (size_t i = 0; i < block.size(); i += 4096) block[i] = 1;
  EXPECT_GE(process_resident_bytes(), before + (48 << 20));
  EXPECT_EQ(block[4096], 1);  // keeps the writes observable
}

TEST(Metrics, HttpCountersCountByStatus) {
  HttpCounters counters;
  counters.record(200);
  counters.record(404);
  counters.record(200);
  EXPECT_EQ(counters.snapshot(), (std::vector<std::pair<int, int64_t>>{{200, 2}, {404, 1}}));
}

TEST(Metrics, ThroughputOverTheWindow) {
  using std::chrono::milliseconds;
  ThroughputMeter meter(milliseconds(10000));
  const auto t0 = std::chrono::steady_clock::time_point{};
  ThroughputRates first = meter.observe(t0, 0, 0);
  EXPECT_EQ(first.generation_tokens_per_s, 0);
  ThroughputRates second = meter.observe(t0 + milliseconds(2000), 400, 100);
  EXPECT_DOUBLE_EQ(second.prompt_tokens_per_s, 200);
  EXPECT_DOUBLE_EQ(second.generation_tokens_per_s, 50);
  // 20 s later the old samples have left the window: the rate spans the last interval.
  ThroughputRates third = meter.observe(t0 + milliseconds(22000), 400, 2100);
  EXPECT_DOUBLE_EQ(third.generation_tokens_per_s, 100);
  ThroughputRates fourth = meter.observe(t0 + milliseconds(24000), 400, 2300);
  EXPECT_DOUBLE_EQ(fourth.generation_tokens_per_s, (2300.0 - 100.0) / 22.0);
}

}  // namespace
}  // namespace specstack

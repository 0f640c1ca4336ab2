#include "cli/bench_soak_command.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/connection_flood.h"
#include "cli/soak_client.h"
#include "cli/soak_workload.h"

namespace specstack::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct SoakFlags {
  SoakTarget target;
  std::string model;  // default: the first of /v1/models
  int64_t num_requests = 1000;
  int32_t workers = 32;
  uint32_t seed = 1;
  double max_seconds = 600;
  int64_t warmup = -1;  // -1: a tenth of the requests, at most 1000
  int64_t report_every = 1000;
  double drain_s = 30;
  double max_rss_drift_pct = -1;  // < 0: reported, not checked
  SoakMix mix;
  FloodOptions flood;
};

// What the soak reads from /metrics at one moment.
struct Snapshot {
  std::string label;
  int64_t done = 0;
  double rss = -1;          // process_resident_memory_bytes
  double kv_resident = -1;  // specstack_kv_cache_resident_bytes
  double kv_total = 0, kv_free = 0, running = 0, waiting = 0;
  double device_used = -1;  // specstack_device_memory_used_bytes
  double heap_in_use = -1;  // specstack_heap_in_use_bytes (malloc's live allocations)
  double heap_held = -1;    // specstack_heap_held_bytes
  double rss_without_kv() const { return kv_resident >= 0 ? rss - kv_resident : rss; }
};

Result<Snapshot> take_snapshot(const SoakTarget& target, std::string label, int64_t done) {
  SS_ASSIGN_OR_RETURN(auto values, scrape_metrics(target));
  auto get = [&](const char* name, double fallback) {
    auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  };
  if (!values.count("specstack_kv_blocks_total") || !values.count("specstack_kv_blocks_free")) {
    return errorf("{}/metrics has no specstack_kv_blocks_total/_free: not a specstack server?",
                  target.url);
  }
  Snapshot s;
  s.label = std::move(label);
  s.done = done;
  s.rss = get("process_resident_memory_bytes", -1);
  s.kv_resident = get("specstack_kv_cache_resident_bytes", -1);
  s.kv_total = get("specstack_kv_blocks_total", 0);
  s.kv_free = get("specstack_kv_blocks_free", 0);
  s.running = get("specstack_num_requests_running", 0);
  s.waiting = get("specstack_num_requests_waiting", 0);
  s.device_used = get("specstack_device_memory_used_bytes", -1);
  s.heap_in_use = get("specstack_heap_in_use_bytes", -1);
  s.heap_held = get("specstack_heap_held_bytes", -1);
  return s;
}

std::string mib(double bytes) {
  return bytes < 0 ? std::string("n/a") : fmt::format("{:.1f}", bytes / 1048576.0);
}

void print_snapshot(const Snapshot& s, double seconds) {
  std::fprintf(stderr,
               "soak: %-9s %7lld done, %6.1f s: RSS %s MiB (without KV pages %s), KV blocks in use "
               "%.0f/%.0f%s\n",
               s.label.c_str(), static_cast<long long>(s.done), seconds, mib(s.rss).c_str(),
               mib(s.rss_without_kv()).c_str(), s.kv_total - s.kv_free, s.kv_total,
               s.device_used >= 0 ? fmt::format(", GPU {} MiB", mib(s.device_used)).c_str() : "");
}

// Counts by outcome; filled by every worker under the mutex.
struct Tally {
  std::mutex mutex;
  std::map<int, int64_t> by_status;  // 0: no response
  std::map<std::string, int64_t> problems;
  int64_t cancelled = 0, malformed_sent = 0, malformed_not_4xx = 0, streamed = 0;
  std::vector<double> latencies;  // completed 2xx requests, seconds
};

void record(Tally& tally, const SoakRequest& request, const SoakOutcome& outcome) {
  std::lock_guard<std::mutex> lock(tally.mutex);
  if (request.stream) ++tally.streamed;
  if (outcome.cancelled) {
    ++tally.cancelled;
    return;
  }
  ++tally.by_status[outcome.status];
  if (!outcome.problem.empty()) ++tally.problems[outcome.problem];
  if (request.malformed) {
    ++tally.malformed_sent;
    if (outcome.status < 400 || outcome.status >= 500) {
      ++tally.malformed_not_4xx;
      ++tally.problems[fmt::format("malformed '{}' answered {}", request.kind, outcome.status)];
    }
  } else if (outcome.status == 200 && outcome.problem.empty()) {
    tally.latencies.push_back(outcome.seconds);
  } else if (outcome.status != 429) {  // 429 is back-pressure, a legitimate answer
    ++tally.problems[fmt::format("well-formed request answered {}", outcome.status)];
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

// Waits until the server holds no request and no block (cancelled streams
// are released on the engine's next iteration), or `seconds` pass.
Result<Snapshot> drain(const SoakTarget& target, int64_t done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  while (true) {
    SS_ASSIGN_OR_RETURN(Snapshot s, take_snapshot(target, "end", done));
    const bool idle = s.running == 0 && s.waiting == 0 && s.kv_free == s.kv_total;
    if (idle || Clock::now() >= deadline) return s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int run_soak(SoakFlags f) {
  if (f.model.empty()) {
    auto model = served_model(f.target);
    if (!model.ok()) return report_error(model.message());
    f.model = *model;
  }
  const int64_t warmup = f.warmup >= 0 ? f.warmup : std::min<int64_t>(1000, f.num_requests / 10);
  std::vector<std::string> failures;
  std::optional<FloodReport> flood;
  if (f.flood.idle > 0 || f.flood.slowloris > 0) {
    auto checked = check_connection_flood(f.target, f.model, f.flood);
    if (!checked.ok()) return report_error(checked.message());
    flood = *checked;
    std::fprintf(stderr,
                 "soak: flood: %d idle + %d slowloris connections held %.1f s; probe %.3f s "
                 "before, slowest %.3f s during, %d failed: %s\n",
                 flood->idle_opened, flood->slowloris_opened, f.flood.hold_s, flood->probe_before_s,
                 flood->probe_during_s, flood->probe_failures, flood->passed ? "ok" : "FAILED");
    if (!flood->passed)
      failures.push_back("a normal request was delayed or failed under the flood");
  }

  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  std::vector<Snapshot> snapshots;
  std::mutex snapshots_mutex;
  auto snap = [&](const std::string& label, int64_t done) {
    auto s = take_snapshot(f.target, label, done);
    std::lock_guard<std::mutex> lock(snapshots_mutex);
    if (!s.ok()) {
      failures.push_back(s.message());
      return;
    }
    print_snapshot(*s, elapsed());
    snapshots.push_back(*s);
  };
  snap("start", 0);
  if (snapshots.empty()) return report_error(failures.back());

  Tally tally;
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> timed_out{false};
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < f.workers; ++w) {
    workers.emplace_back([&] {
      while (true) {
        const int64_t i = next.fetch_add(1);
        if (i >= f.num_requests) return;
        if (elapsed() > f.max_seconds) {
          timed_out = true;
          return;
        }
        const SoakRequest request = make_soak_request(f.seed, i, f.mix, f.model);
        record(tally, request, send_soak_request(f.target, request));
        const int64_t n = done.fetch_add(1) + 1;
        if (n == warmup) snap("warm-up", n);
        if (f.report_every > 0 && n % f.report_every == 0 && n != warmup) snap("progress", n);
      }
    });
  }
  for (auto& t : workers) t.join();
  const double seconds = elapsed();
  auto end = drain(f.target, done.load(), f.drain_s);
  if (!end.ok()) return report_error(end.message());
  print_snapshot(*end, elapsed());
  snapshots.push_back(*end);

  // The report.
  const int64_t n_done = done.load();
  std::printf("\n## bench soak: %lld requests, %d workers, seed %u, %s\n\n",
              static_cast<long long>(n_done), f.workers, f.seed, f.target.url.c_str());
  std::printf("%.1f requests/s over %.1f s%s\n", static_cast<double>(n_done) / seconds, seconds,
              timed_out ? " (stopped at --max-seconds)" : "");
  std::printf("latency of completed requests: p50 %.3f s, p99 %.3f s (%zu requests)\n",
              percentile(tally.latencies, 0.5), percentile(tally.latencies, 0.99),
              tally.latencies.size());
  std::printf("streamed %lld, cancelled mid-stream %lld, malformed %lld\n",
              static_cast<long long>(tally.streamed), static_cast<long long>(tally.cancelled),
              static_cast<long long>(tally.malformed_sent));
  int64_t n_5xx = 0;
  std::printf("status codes:");
  for (const auto& [status, count] : tally.by_status) {
    std::printf(" %s %lld", status == 0 ? "none" : std::to_string(status).c_str(),
                static_cast<long long>(count));
    if (status >= 500) n_5xx += count;
  }
  std::printf(
      "\n\n| point | requests | RSS MiB | RSS without KV pages MiB | malloc in use / held MiB | KV "
      "blocks in use |%s\n",
      snapshots.front().device_used >= 0 ? " GPU MiB |" : "");
  std::printf("|---|---|---|---|---|---|%s\n", snapshots.front().device_used >= 0 ? "---|" : "");
  const Snapshot* warm = nullptr;
  for (const Snapshot& s : snapshots) {
    if (s.label == "warm-up") warm = &s;
    std::printf("| %s | %lld | %s | %s | %s / %s | %.0f / %.0f |%s\n", s.label.c_str(),
                static_cast<long long>(s.done), mib(s.rss).c_str(), mib(s.rss_without_kv()).c_str(),
                mib(s.heap_in_use).c_str(), mib(s.heap_held).c_str(), s.kv_total - s.kv_free,
                s.kv_total,
                s.device_used >= 0 ? fmt::format(" {} |", mib(s.device_used)).c_str() : "");
  }
  if (warm != nullptr && warm->rss > 0) {
    const double drift = 100.0 * (end->rss - warm->rss) / warm->rss;
    const double drift_heap =
        100.0 * (end->rss_without_kv() - warm->rss_without_kv()) / warm->rss_without_kv();
    std::printf("\nRSS from warm-up to end: %+.2f%% (without KV pages: %+.2f%%)\n", drift,
                drift_heap);
    if (f.max_rss_drift_pct >= 0 && drift_heap > f.max_rss_drift_pct) {
      failures.push_back(fmt::format("RSS without KV pages grew {:.2f}% after warm-up (limit {}%)",
                                     drift_heap, f.max_rss_drift_pct));
    }
  }
  for (const auto& [problem, count] : tally.problems) {
    std::printf("problem: %s (%lld)\n", problem.c_str(), static_cast<long long>(count));
  }
  if (n_5xx > 0) failures.push_back(fmt::format("{} responses were 5xx", n_5xx));
  if (!tally.problems.empty()) failures.push_back("some responses were wrong (see 'problem:')");
  if (end->kv_free != end->kv_total || end->running != 0 || end->waiting != 0) {
    failures.push_back(
        fmt::format("after {:.0f} s the server still holds {:.0f} KV blocks and {:.0f} requests",
                    f.drain_s, end->kv_total - end->kv_free, end->running + end->waiting));
  }
  for (const std::string& failure : failures) std::printf("FAILED: %s\n", failure.c_str());
  if (failures.empty()) std::printf("ok: no 5xx, every response well-formed, every block free\n");
  return failures.empty() ? 0 : 1;
}

}  // namespace

std::function<int()> add_bench_soak_command(CLI::App& bench) {
  auto f = std::make_shared<SoakFlags>();
  CLI::App* soak = bench.add_subcommand(
      "soak", "mixed long-running load against a live server, watching its memory and KV pool");
  soak->add_option("--url", f->target.url, "server base URL (default http://127.0.0.1:8000)");
  soak->add_option("--api-key", f->target.api_key, "bearer token for a server with --api-key");
  soak->add_option("--model", f->model, "model name to request (default: the first served)");
  soak->add_option("--num-requests", f->num_requests, "requests to send")
      ->check(CLI::PositiveNumber);
  soak->add_option("--workers", f->workers, "concurrent clients")->check(CLI::Range(1, 1024));
  soak->add_option("--seed", f->seed, "workload seed");
  soak->add_option("--max-seconds", f->max_seconds, "stop sending after this long")
      ->check(CLI::PositiveNumber);
  soak->add_option("--warmup", f->warmup,
                   "requests before the 'warm-up' memory reading (default: a tenth, at most 1000)")
      ->check(CLI::NonNegativeNumber);
  soak->add_option("--report-every", f->report_every, "read /metrics every N requests (0: never)")
      ->check(CLI::NonNegativeNumber);
  soak->add_option("--drain-seconds", f->drain_s,
                   "how long the server may take to free every block at the end")
      ->check(CLI::PositiveNumber);
  soak->add_option("--max-rss-drift", f->max_rss_drift_pct,
                   "fail if RSS without KV pages grows more than this % after warm-up");
  soak->add_option("--request-timeout", f->target.timeout_s, "seconds per request")
      ->check(CLI::PositiveNumber);
  soak->add_option("--max-prompt-words", f->mix.max_prompt_words, "prompt length up to N words")
      ->check(CLI::PositiveNumber);
  soak->add_option("--max-tokens", f->mix.max_tokens, "max_tokens up to N")
      ->check(CLI::PositiveNumber);
  soak->add_option("--stream-fraction", f->mix.stream_fraction, "share of streamed requests")
      ->check(CLI::Range(0.0, 1.0));
  soak->add_option("--cancel-fraction", f->mix.cancel_fraction, "share of streams closed mid-way")
      ->check(CLI::Range(0.0, 1.0));
  soak->add_option("--logprobs-fraction", f->mix.logprobs_fraction, "share asking for logprobs")
      ->check(CLI::Range(0.0, 1.0));
  soak->add_option("--malformed-fraction", f->mix.malformed_fraction,
                   "share of malformed requests (must get 4xx)")
      ->check(CLI::Range(0.0, 1.0));
  soak->add_option("--flood-idle", f->flood.idle,
                   "before the load: hold N idle connections (loopback servers only)")
      ->check(CLI::Range(0, 20000));
  soak->add_option("--flood-slowloris", f->flood.slowloris,
                   "before the load: hold N connections trickling headers (loopback only)")
      ->check(CLI::Range(0, 5000));
  soak->add_option("--flood-seconds", f->flood.hold_s, "how long the flood is held")
      ->check(CLI::Range(0.5, 120.0));
  soak->add_option("--flood-max-delay", f->flood.max_delay_s,
                   "seconds a probe may slow down under the flood")
      ->check(CLI::PositiveNumber);
  return [f] { return run_soak(*f); };
}

}  // namespace specstack::cli

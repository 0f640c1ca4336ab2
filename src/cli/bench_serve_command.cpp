// specstack bench serve: open-loop load against the serving engine
// (in-process). Requests arrive as a seeded Poisson process with seeded
// prompt/output lengths; every request is streamed by its own reader. The
// same workload runs with continuous batching and with static batching
// (drain, then refill) on the same model, and the report gives output tok/s,
// TTFT and inter-token latency percentiles, the ramp / steady / tail phase
// split and step spikes (steps longer than 2x the median step), plus the
// continuous/static ratio. Writes CSVs and, if gnuplot is installed, a PNG.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "cli/bench_soak_command.h"
#include "cli/bench_spec_command.h"
#include "cli/bench_ttft_command.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "engine/engine.h"

namespace specstack::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchServeFlags {
  ModelFlags model;
  double rate = 4.0;  // requests per second
  int32_t num_requests = 48;
  uint32_t seed = 1;
  int32_t input_len = 128;
  int32_t output_len = 64;
  double len_spread = 0.5;  // lengths uniform in mean * [1 - spread, 1 + spread]
  int32_t max_num_seqs = 32;
  int32_t max_num_batched_tokens = 512;
  int64_t kv_tokens = 0;  // 0: enough for every request at once
  bool skip_static = false;
  std::string out_prefix = "bench_serve";
  // Every request's sampling (greedy by default). On a GPU sampled rows are
  // picked on the device unless penalties (or logprobs) need their logits on
  // the host: --repetition-penalty is the way to time that host path.
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float repetition_penalty = 1.0f;
  int32_t top_logprobs = -1;  // >= 0: every request asks for logprobs
  DraftModelFlags draft;      // with --spec-decode: every request speculates
  SpecDecodeFlags spec;
};

struct RequestPlan {
  double arrival;  // seconds after start
  std::vector<int32_t> prompt;
  int32_t output_len;
};

struct RequestTrace {
  double arrival = 0;
  double first_token = -1;
  double finish = 0;
  std::vector<double> token_times;
};

struct ModeResult {
  std::string mode;
  std::vector<RequestTrace> traces;
  std::vector<StepRecord> steps;
  double wall = 0;
};

std::vector<RequestPlan> make_workload(const BenchServeFlags& f, int64_t vocab) {
  std::mt19937_64 rng(f.seed);
  std::exponential_distribution<double> gap(f.rate);
  auto length = [&](int32_t mean) {
    const double lo = mean * (1 - f.len_spread), hi = mean * (1 + f.len_spread);
    return std::max<int32_t>(
        1, static_cast<int32_t>(std::uniform_real_distribution<double>(lo, hi)(rng)));
  };
  std::vector<RequestPlan> plans;
  double t = 0;
  for (int32_t i = 0; i < f.num_requests; ++i) {
    RequestPlan plan;
    plan.arrival = t;
    t += gap(rng);
    plan.prompt.resize(static_cast<size_t>(length(f.input_len)));
    for (auto& id : plan.prompt)
      id = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3));
    plan.output_len = length(f.output_len);
    plans.push_back(std::move(plan));
  }
  return plans;
}

ModeResult run_mode(ModelInstance& model, ModelInstance* draft, const BenchServeFlags& f,
                    const std::vector<RequestPlan>& plans, bool static_batching) {
  EngineOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.max_num_batched_tokens = f.max_num_batched_tokens;
  options.static_batching = static_batching;
  options.record_steps = true;
  options.max_queue = f.num_requests + 1;
  options.enable_prefix_caching = false;  // random prompts; keep the modes comparable
  options.specdecode = f.spec.engine_options(draft);
  Engine engine(model, options);
  ModeResult result;
  result.mode = static_batching ? "static" : "continuous";
  result.traces.resize(plans.size());
  std::vector<std::thread> readers;
  const auto start = Clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  for (size_t i = 0; i < plans.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(plans[i].arrival)));
    SamplingParams params;
    params.temperature = f.temperature;
    params.top_p = f.top_p;
    params.top_k = f.top_k;
    params.repetition_penalty = f.repetition_penalty;
    params.seed = f.seed + i;
    params.ignore_eos = true;
    params.max_tokens = plans[i].output_len;
    auto stream = engine.submit(RequestOptions{plans[i].prompt, params, 1, f.top_logprobs, {}});
    SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
    result.traces[i].arrival = since_start();
    readers.emplace_back([&, i, s = *stream] {
      RequestTrace& trace = result.traces[i];
      while (!s->done()) {
        auto event = s->next(std::chrono::milliseconds(1000));
        if (!event) continue;
        const double now = since_start();
        for (size_t k = 0; k < event->tokens.size(); ++k) trace.token_times.push_back(now);
        if (trace.first_token < 0 && !event->tokens.empty()) trace.first_token = now;
      }
      trace.finish = since_start();
    });
  }
  for (auto& r : readers) r.join();
  result.wall = since_start();
  result.steps = engine.step_records();
  if (draft != nullptr) {
    const EngineMetrics m = engine.metrics();
    std::printf(
        "speculative (%s): %lld draft tokens, %lld accepted (%.3f), %lld verifications (%lld on "
        "the device)\n",
        result.mode.c_str(), static_cast<long long>(m.specdecode_draft_tokens_total),
        static_cast<long long>(m.specdecode_accepted_tokens_total),
        m.specdecode_draft_tokens_total > 0
            ? static_cast<double>(m.specdecode_accepted_tokens_total) /
                  static_cast<double>(m.specdecode_draft_tokens_total)
            : 0.0,
        static_cast<long long>(m.specdecode_verify_total),
        static_cast<long long>(m.specdecode_device_verify_total));
  }
  return result;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

struct Summary {
  double output_tok_s = 0;
  double ttft[3] = {}, itl[3] = {};
  double ramp_s = 0, steady_s = 0, tail_s = 0;
  double ramp_tok_s = 0, steady_tok_s = 0, tail_tok_s = 0;
  int64_t spikes = 0;
  double spike_s = 0;
  double median_step_s = 0;
};

// Phases: ramp until the running count first reaches its median over the run,
// tail from the last arrival on, steady in between.
Summary summarize(const ModeResult& r) {
  Summary s;
  std::vector<double> ttft, itl;
  int64_t tokens = 0;
  double last_arrival = 0;
  for (const auto& t : r.traces) {
    ttft.push_back(t.first_token - t.arrival);
    for (size_t k = 1; k < t.token_times.size(); ++k)
      itl.push_back(t.token_times[k] - t.token_times[k - 1]);
    tokens += static_cast<int64_t>(t.token_times.size());
    last_arrival = std::max(last_arrival, t.arrival);
  }
  s.output_tok_s = static_cast<double>(tokens) / r.wall;
  const double ps[3] = {0.5, 0.9, 0.99};
  for (int i = 0; i < 3; ++i) {
    s.ttft[i] = percentile(ttft, ps[i]);
    s.itl[i] = percentile(itl, ps[i]);
  }
  if (r.steps.empty()) return s;
  std::vector<double> running, durations;
  for (const auto& step : r.steps) {
    running.push_back(step.n_running);
    durations.push_back(step.seconds);
  }
  const double median_running = percentile(running, 0.5);
  s.median_step_s = percentile(durations, 0.5);
  double ramp_end = r.steps.back().start_seconds;
  for (const auto& step : r.steps) {
    if (step.n_running >= median_running) {
      ramp_end = step.start_seconds;
      break;
    }
  }
  const double tail_start = std::max(ramp_end, last_arrival);
  int64_t ramp_tokens = 0, steady_tokens = 0, tail_tokens = 0;
  for (const auto& step : r.steps) {
    if (step.start_seconds < ramp_end)
      ramp_tokens += step.n_decode;
    else if (step.start_seconds < tail_start)
      steady_tokens += step.n_decode;
    else
      tail_tokens += step.n_decode;
    if (step.seconds > 2 * s.median_step_s) {
      ++s.spikes;
      s.spike_s += step.seconds;
    }
  }
  s.ramp_s = ramp_end;
  s.steady_s = tail_start - ramp_end;
  s.tail_s = r.wall - tail_start;
  auto rate = [](int64_t n, double secs) { return secs > 0 ? static_cast<double>(n) / secs : 0.0; };
  s.ramp_tok_s = rate(ramp_tokens, s.ramp_s);
  s.steady_tok_s = rate(steady_tokens, s.steady_s);
  s.tail_tok_s = rate(tail_tokens, s.tail_s);
  return s;
}

void write_csvs(const std::string& prefix, const std::vector<ModeResult>& results) {
  std::ofstream requests(prefix + "_requests.csv");
  requests << "mode,request,arrival_s,ttft_s,finish_s,output_tokens\n";
  std::ofstream steps(prefix + "_steps.csv");
  steps << "mode,start_s,seconds,n_tokens,n_decode,n_running\n";
  for (const auto& r : results) {
    for (size_t i = 0; i < r.traces.size(); ++i) {
      const auto& t = r.traces[i];
      requests << r.mode << "," << i << "," << t.arrival << "," << t.first_token - t.arrival << ","
               << t.finish << "," << t.token_times.size() << "\n";
    }
    for (const auto& s : r.steps) {
      steps << r.mode << "," << s.start_seconds << "," << s.seconds << "," << s.n_tokens << ","
            << s.n_decode << "," << s.n_running << "\n";
    }
  }
}

void plot(const std::string& prefix, const std::vector<ModeResult>& results) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "bench serve: gnuplot not found, no PNG written\n");
    return;
  }
  // One data file per mode: step start vs step duration and running count.
  std::string plots;
  for (const auto& r : results) {
    const std::string data = prefix + "_" + r.mode + "_steps.dat";
    std::ofstream out(data);
    for (const auto& s : r.steps)
      out << s.start_seconds << " " << s.seconds * 1000 << " " << s.n_running << "\n";
    if (!plots.empty()) plots += ", ";
    plots += "'" + data + "' using 1:2 with points pt 7 ps 0.4 title '" + r.mode + " step ms', '" +
             data + "' using 1:3 axes x1y2 with lines title '" + r.mode + " running'";
  }
  const std::string script = prefix + ".gp";
  std::ofstream(script)
      << "set terminal png size 1200,600\nset output '" << prefix << ".png'\n"
      << "set xlabel 'seconds'\nset ylabel 'step ms'\nset y2label 'running sequences'\n"
      << "set ytics nomirror\nset y2tics\nset key outside\nplot " << plots << "\n";
  if (std::system(("gnuplot " + script).c_str()) == 0) {
    std::fprintf(stderr, "bench serve: wrote %s.png\n", prefix.c_str());
  }
}

int run_bench_serve(const BenchServeFlags& f) {
  if (Status status = f.spec.validate(f.draft.has_draft()); !status.ok()) {
    return report_error(status.message());
  }
  if (f.draft.has_draft()) {
    if (Status status = f.draft.validate(f.model); !status.ok())
      return report_error(status.message());
  }
  auto options = f.model.instance_options(0);
  if (!options.ok()) return report_error(options.message());
  auto config =
      load_model_config(options->config_path.empty() ? options->model_dir : options->config_path);
  if (!config.ok()) return report_error(config.message());
  const auto plans = make_workload(f, config->vocab_size);
  int64_t needed = 0;
  for (const auto& p : plans) needed += static_cast<int64_t>(p.prompt.size()) + p.output_len + 16;
  options->kv_tokens = f.kv_tokens > 0 ? f.kv_tokens : needed;
  CpuBackend backend(CpuBackendOptions{f.model.threads});
  auto instance = ModelInstance::create(*options, backend);
  if (!instance.ok()) return report_error(instance.message());
  std::unique_ptr<ModelInstance> draft;
  if (f.spec.enabled) {
    auto loaded = load_draft_model(f.draft, f.model, options->kv_tokens,
                                   options->max_tokens_per_step, backend);
    if (!loaded.ok()) return report_error(loaded.message());
    draft = std::move(loaded).value();
  }

  std::vector<ModeResult> results;
  results.push_back(run_mode(**instance, draft.get(), f, plans, /*static_batching=*/false));
  if (!f.skip_static) {
    results.push_back(run_mode(**instance, draft.get(), f, plans, /*static_batching=*/true));
  }
  write_csvs(f.out_prefix, results);
  plot(f.out_prefix, results);

  std::printf(
      "| mode | output tok/s | TTFT p50/p90/p99 (s) | ITL p50/p90/p99 (ms) | ramp s (tok/s) | "
      "steady s (tok/s) | tail s (tok/s) | spikes (count, s) |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<Summary> summaries;
  for (const auto& r : results) {
    Summary s = summarize(r);
    summaries.push_back(s);
    std::printf(
        "| %s | %.1f | %.3f / %.3f / %.3f | %.1f / %.1f / %.1f | %.1f (%.1f) | %.1f (%.1f) | %.1f "
        "(%.1f) | %lld, %.2f |\n",
        r.mode.c_str(), s.output_tok_s, s.ttft[0], s.ttft[1], s.ttft[2], s.itl[0] * 1e3,
        s.itl[1] * 1e3, s.itl[2] * 1e3, s.ramp_s, s.ramp_tok_s, s.steady_s, s.steady_tok_s,
        s.tail_s, s.tail_tok_s, static_cast<long long>(s.spikes), s.spike_s);
  }
  if (summaries.size() == 2 && summaries[1].output_tok_s > 0) {
    std::printf("\ncontinuous / static output tok/s: %.2fx; TTFT p50 static / continuous: %.2fx\n",
                summaries[0].output_tok_s / summaries[1].output_tok_s,
                summaries[0].ttft[0] > 0 ? summaries[1].ttft[0] / summaries[0].ttft[0] : 0.0);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<BenchServeFlags>();
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* serve =
      bench->add_subcommand("serve", "open-loop Poisson load on the serving engine (in-process)");
  flags->model.add_to(*serve);
  serve->add_option("--rate", flags->rate, "request arrival rate (requests/s)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--num-requests", flags->num_requests, "requests")->check(CLI::PositiveNumber);
  serve->add_option("--seed", flags->seed, "workload seed");
  serve->add_option("--input-len", flags->input_len, "mean prompt length")
      ->check(CLI::PositiveNumber);
  serve->add_option("--output-len", flags->output_len, "mean output length")
      ->check(CLI::PositiveNumber);
  serve->add_option("--len-spread", flags->len_spread, "lengths uniform in mean*[1-s, 1+s]")
      ->check(CLI::Range(0.0, 0.99));
  serve->add_option("--max-num-seqs", flags->max_num_seqs, "running sequences cap")
      ->check(CLI::PositiveNumber);
  serve->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens, "step token budget")
      ->check(CLI::PositiveNumber);
  serve->add_option("--kv-tokens", flags->kv_tokens,
                    "KV capacity in tokens (default: all requests at once)");
  serve->add_flag("--skip-static", flags->skip_static, "do not run the static-batching baseline");
  serve->add_option("--temperature", flags->temperature, "sampling temperature (0: greedy)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--top-p", flags->top_p, "nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  serve->add_option("--top-k", flags->top_k, "top-k (0: all)")->check(CLI::NonNegativeNumber);
  serve
      ->add_option("--top-logprobs", flags->top_logprobs,
                   "every request asks for logprobs with this many alternatives (-1: none)")
      ->check(CLI::Range(-1, 20));
  serve
      ->add_option("--repetition-penalty", flags->repetition_penalty,
                   "repetition penalty (not 1: the host samples from downloaded logits)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--out", flags->out_prefix, "output prefix for CSV / PNG files");
  flags->draft.add_to(*serve);
  flags->spec.add_to(*serve, "every request of the workload speculates");
  std::function<int()> run_ttft = add_bench_ttft_command(*bench);
  std::function<int()> run_spec = add_bench_spec_command(*bench);
  std::function<int()> run_soak = add_bench_soak_command(*bench);
  return [flags, bench, run_ttft, run_spec, run_soak] {
    if (bench->got_subcommand("ttft")) return run_ttft();
    if (bench->got_subcommand("spec")) return run_spec();
    if (bench->got_subcommand("soak")) return run_soak();
    return run_bench_serve(*flags);
  };
}

}  // namespace specstack::cli

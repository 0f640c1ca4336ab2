// specstack bench ttft: time to first token with full prefill vs speculative
// prefill, per prompt length and keep fraction, measured in one run on the
// same target and draft ModelInstances. Alongside, the draft's own full
// prefill gives the cost ratio r = C_draft / C_target, and the cost model
// speedup = 1 / (r + k + eps) (ALGORITHM.md) is solved for the fixed overhead
// eps. Warm-up once, median of --repeats; a markdown table is printed last,
// PREFIX.csv and (with gnuplot) PREFIX.png are written.
#include "cli/bench_ttft_command.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "engine/engine.h"

namespace specstack::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct BenchTtftFlags {
  ModelFlags model;
  DraftModelFlags draft;
  SpecPrefillOptions settings;  // lookahead, chunk, pool; keep comes from --keep
  std::vector<int64_t> lengths = {1024, 2048, 4096, 8192};
  std::vector<double> keeps = {0.1, 0.2, 0.3, 0.5, 1.0};
  int32_t repeats = 3;
  uint32_t seed = 1;
  int32_t max_num_batched_tokens = 2048;
  std::string out_prefix = "bench_ttft";
};

struct Measurement {
  double ttft = 0;  // seconds from submit to the first token
  SpecPrefillStats stats;
};

// Every measured request gets its own prompt: the same seeded ids per
// (length, repeat), with a first token unique to the measurement. Block
// hashes chain from the first block, so no request can hit KV cached by
// another (the draft publishes its prompt blocks even with caching off in
// the engines), while the costs stay those of the same prompt.
std::vector<int32_t> make_prompt(uint32_t seed, int64_t length, int32_t repeat, int32_t variant,
                                 int64_t vocab) {
  std::vector<int32_t> prompt = seeded_prompt(seed, length, repeat, vocab);
  prompt[0] = 3 + variant;
  return prompt;
}

// One request with max_tokens 1, waited for to the end.
Result<Measurement> measure(Engine& engine, std::vector<int32_t> prompt,
                            std::optional<double> keep) {
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 1;
  params.ignore_eos = true;
  RequestOptions request{std::move(prompt), params, 1, -1, {}};
  if (keep) request.specprefill = SpecPrefillControls{true, *keep};
  const auto start = SteadyClock::now();
  SS_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.submit(std::move(request)));
  Measurement m;
  bool first = true;
  while (!stream->done()) {
    auto event = stream->next(std::chrono::milliseconds(1000));
    if (!event || event->tokens.empty() || !first) continue;
    m.ttft = std::chrono::duration<double>(SteadyClock::now() - start).count();
    first = false;
  }
  if (first) return make_error("the request finished without a token");
  m.stats = stream->stats().specprefill;
  return m;
}

EngineOptions engine_options(const BenchTtftFlags& f, ModelInstance* draft) {
  EngineOptions options;
  options.max_num_batched_tokens = f.max_num_batched_tokens;
  options.max_num_seqs = 1;
  options.enable_prefix_caching = false;
  if (draft != nullptr) {
    options.specprefill = f.settings;
    options.specprefill.draft = draft;
    options.specprefill.threshold = 0;  // requests force it on anyway
  }
  return options;
}

// The three engines of one measurement round, each alive only while it runs
// (two engines on one ModelInstance would share its KV pool across threads).
struct Round {
  Measurement full;
  Measurement draft;
  std::vector<Measurement> spec;  // per keep
};

Result<Round> run_round(const BenchTtftFlags& f, ModelInstance& target, ModelInstance& draft,
                        int64_t length, int32_t repeat, const std::vector<double>& keeps) {
  // Ids both models embed (a draft's table may be padded less than the target's).
  const int64_t vocab = std::min(target.config().vocab_size, draft.config().vocab_size);
  Round round;
  int32_t variant = 0;
  {
    Engine engine(target, engine_options(f, nullptr));
    SS_ASSIGN_OR_RETURN(round.full,
                        measure(engine, make_prompt(f.seed, length, repeat, variant++, vocab), {}));
  }
  {
    Engine engine(draft, engine_options(f, nullptr));
    SS_ASSIGN_OR_RETURN(round.draft,
                        measure(engine, make_prompt(f.seed, length, repeat, variant++, vocab), {}));
  }
  Engine engine(target, engine_options(f, &draft));
  for (double keep : keeps) {
    SS_ASSIGN_OR_RETURN(
        Measurement m,
        measure(engine, make_prompt(f.seed, length, repeat, variant++, vocab), keep));
    round.spec.push_back(std::move(m));
  }
  return round;
}

struct Row {
  int64_t length = 0;
  double keep = 0;
  double ttft_full = 0, ttft_spec = 0, ttft_draft = 0;
  double speedup = 0, r = 0, k_actual = 0, eps = 0, scoring_ms = 0;
  // scoring_ms's parts, and the rest of TTFT spec (the target's sparse prefill).
  double draft_prefill_ms = 0, lookahead_ms = 0, lookahead_forward_ms = 0, score_ms = 0,
         target_ms = 0;
  int32_t applied_runs = 0;
};

std::vector<Row> summarize(int64_t length, const std::vector<Round>& rounds,
                           const std::vector<double>& keeps) {
  std::vector<double> full, draft;
  for (const Round& round : rounds) {
    full.push_back(round.full.ttft);
    draft.push_back(round.draft.ttft);
  }
  std::vector<Row> rows;
  for (size_t i = 0; i < keeps.size(); ++i) {
    Row row;
    row.length = length;
    row.keep = keeps[i];
    row.ttft_full = median(full);
    row.ttft_draft = median(draft);
    std::vector<double> spec, k, scoring, draft_prefill, lookahead, lookahead_forward, score,
        target;
    for (const Round& round : rounds) {
      const Measurement& m = round.spec[i];
      spec.push_back(m.ttft);
      // A fallback prefilled everything: k = 1.
      k.push_back(m.stats.applied && m.stats.prompt_tokens > 0
                      ? static_cast<double>(m.stats.kept_tokens) /
                            static_cast<double>(m.stats.prompt_tokens)
                      : 1.0);
      scoring.push_back(m.stats.scoring_ms);
      draft_prefill.push_back(m.stats.draft_prefill_ms);
      lookahead.push_back(m.stats.lookahead_ms);
      lookahead_forward.push_back(m.stats.lookahead_forward_ms);
      score.push_back(m.stats.score_ms);
      target.push_back(m.ttft * 1e3 - m.stats.scoring_ms);
      row.applied_runs += m.stats.applied ? 1 : 0;
    }
    row.ttft_spec = median(spec);
    row.k_actual = median(k);
    row.scoring_ms = median(scoring);
    row.draft_prefill_ms = median(draft_prefill);
    row.lookahead_ms = median(lookahead);
    row.lookahead_forward_ms = median(lookahead_forward);
    row.score_ms = median(score);
    row.target_ms = median(target);
    row.speedup = row.ttft_full / row.ttft_spec;
    row.r = row.ttft_draft / row.ttft_full;
    row.eps = 1.0 / row.speedup - row.r - row.k_actual;
    rows.push_back(row);
  }
  return rows;
}

void write_csv(const std::string& prefix, const std::vector<Row>& rows, int32_t repeats) {
  std::ofstream csv(prefix + ".csv");
  csv << "length,keep,k_actual,ttft_full_s,ttft_spec_s,ttft_draft_s,speedup,r,eps,scoring_ms,"
         "draft_prefill_ms,lookahead_ms,lookahead_forward_ms,score_ms,target_ms,applied_runs,"
         "repeats\n";
  for (const Row& r : rows) {
    csv << fmt::format(
        "{},{},{:.4f},{:.6f},{:.6f},{:.6f},{:.4f},{:.4f},{:.4f},{:.2f},{:.2f},{:.2f},{:.2f},{:.2f},"
        "{:.2f},"
        "{},"
        "{}\n",
        r.length, r.keep, r.k_actual, r.ttft_full, r.ttft_spec, r.ttft_draft, r.speedup, r.r, r.eps,
        r.scoring_ms, r.draft_prefill_ms, r.lookahead_ms, r.lookahead_forward_ms, r.score_ms,
        r.target_ms, r.applied_runs, repeats);
  }
  std::fprintf(stderr, "bench ttft: wrote %s.csv\n", prefix.c_str());
}

// Speedup vs prompt length, one line per keep fraction.
void plot(const std::string& prefix, const std::vector<Row>& rows,
          const std::vector<double>& keeps) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "bench ttft: gnuplot not found, no PNG written\n");
    return;
  }
  const std::string data = prefix + "_speedup.dat";
  std::ofstream out(data);
  std::string plots;
  for (size_t i = 0; i < keeps.size(); ++i) {
    out << "# keep " << keeps[i] << "\n";
    for (const Row& r : rows) {
      if (r.keep == keeps[i]) out << r.length << " " << r.speedup << "\n";
    }
    out << "\n\n";  // gnuplot: a new data set (index)
    if (!plots.empty()) plots += ", ";
    plots += fmt::format("'{}' index {} using 1:2 with linespoints title 'keep {:g}'", data, i,
                         keeps[i]);
  }
  out.close();
  const std::string script = prefix + ".gp";
  std::ofstream(script)
      << "set terminal png size 900,600\nset output '" << prefix << ".png'\n"
      << "set xlabel 'prompt tokens'\nset ylabel 'TTFT speedup (full / SpecPrefill)'\n"
      << "set logscale x 2\nset grid\nset key top left\nplot " << plots << "\n";
  if (std::system(("gnuplot " + script).c_str()) == 0) {
    std::fprintf(stderr, "bench ttft: wrote %s.png\n", prefix.c_str());
  }
}

Status validate(const BenchTtftFlags& f) {
  if (!f.draft.has_draft())
    return make_error("bench ttft needs --draft DIR (or --dummy-weights --draft-config F)");
  SS_TRY(f.draft.validate(f.model));
  SS_TRY(validate_specprefill_settings(f.settings));
  for (int64_t length : f.lengths) {
    if (length < 2) return errorf("--lengths: {} is too short (at least 2 tokens)", length);
  }
  for (double keep : f.keeps) {
    if (!(keep > 0 && keep <= 1)) return errorf("--keep: {} is not in (0, 1]", keep);
  }
  if (f.repeats < 1) return errorf("--repeats must be >= 1, got {}", f.repeats);
  return Status::ok_status();
}

int run_bench_ttft(const BenchTtftFlags& f) {
  if (Status status = validate(f); !status.ok()) return report_error(status.message());
  auto options = f.model.instance_options(0);
  if (!options.ok()) return report_error(options.message());
  auto config =
      load_model_config(options->config_path.empty() ? options->model_dir : options->config_path);
  if (!config.ok()) return report_error(config.message());
  auto draft_config = load_draft_config(f.draft, *config);
  if (!draft_config.ok()) return report_error(draft_config.message());
  const int64_t max_length = *std::max_element(f.lengths.begin(), f.lengths.end());
  for (const ModelConfig* c : {&*config, &*draft_config}) {
    if (c->max_position_embeddings > 0 &&
        max_length + f.settings.lookahead > c->max_position_embeddings) {
      return report_error(
          fmt::format("--lengths: {} tokens (+ lookahead {}) exceed the context of {} tokens",
                      max_length, f.settings.lookahead, c->max_position_embeddings));
    }
  }
  if (config->vocab_size <= 3 + 2 + static_cast<int64_t>(f.keeps.size())) {
    return report_error("the vocabulary is too small for distinct benchmark prompts");
  }

  CpuBackend backend(CpuBackendOptions{f.model.threads});
  options->kv_tokens = max_length + 1 + 2 * f.model.block_size;
  auto target = ModelInstance::create(*options, backend);
  if (!target.ok()) return report_error(target.message());
  auto draft =
      load_draft_model(f.draft, f.model, max_length + f.settings.lookahead + 2 * f.model.block_size,
                       f.max_num_batched_tokens, backend);
  if (!draft.ok()) return report_error(draft.message());
  auto describe = [](ModelInstance& m) {
    const ModelConfig& c = m.config();
    return fmt::format("{}, {} layers, hidden {}, {:.1f} MiB", architecture_name(c.arch),
                       c.n_layers, c.hidden_size, m.model().weight_bytes() / 1048576.0);
  };
  std::fprintf(stderr, "bench ttft: target %s; draft %s\n", describe(**target).c_str(),
               describe(**draft).c_str());

  // Warm-up: every engine kind once on a short prompt (seeded apart from the measured ones).
  const int64_t warm_length =
      std::min<int64_t>(*std::min_element(f.lengths.begin(), f.lengths.end()), 256);
  if (auto warm = run_round(f, **target, **draft, warm_length, -1, {f.keeps[0]}); !warm.ok()) {
    return report_error(warm.message());
  }

  std::vector<Row> rows;
  std::map<std::string, int32_t> fallbacks;  // reason -> count
  for (int64_t length : f.lengths) {
    std::vector<Round> rounds;
    for (int32_t repeat = 0; repeat < f.repeats; ++repeat) {
      auto round = run_round(f, **target, **draft, length, repeat, f.keeps);
      if (!round.ok()) return report_error(round.message());
      std::string line =
          fmt::format("bench ttft: length {} repeat {}: full {:.3f} s, draft {:.3f} s", length,
                      repeat + 1, round->full.ttft, round->draft.ttft);
      for (size_t i = 0; i < f.keeps.size(); ++i) {
        const Measurement& m = round->spec[i];
        line += fmt::format(", keep {:g} {:.3f} s", f.keeps[i], m.ttft);
        if (!m.stats.applied)
          ++fallbacks[m.stats.fallback_reason.empty() ? "not attempted" : m.stats.fallback_reason];
      }
      std::fprintf(stderr, "%s\n", line.c_str());
      rounds.push_back(std::move(round).value());
    }
    for (const Row& row : summarize(length, rounds, f.keeps)) rows.push_back(row);
  }
  write_csv(f.out_prefix, rows, f.repeats);
  plot(f.out_prefix, rows, f.keeps);

  std::printf(
      "| length | keep | TTFT full s | TTFT spec s | speedup | r | k_actual | eps | scoring_ms "
      "| draft prefill ms | lookahead ms (in forwards) | score ms | target ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %lld | %g | %.4f | %.4f | %.2fx | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f (%.1f) | %.1f "
        "| %.1f "
        "|\n",
        static_cast<long long>(r.length), r.keep, r.ttft_full, r.ttft_spec, r.speedup, r.r,
        r.k_actual, r.eps, r.scoring_ms, r.draft_prefill_ms, r.lookahead_ms, r.lookahead_forward_ms,
        r.score_ms, r.target_ms);
  }
  std::printf(
      "\nmedian of %d repeat(s); r = C_draft / C_target (full prefills), k_actual = kept / prompt "
      "tokens, "
      "eps = 1/speedup - r - k_actual\n",
      f.repeats);
  if (!fallbacks.empty()) {
    std::string reasons;
    for (const auto& [reason, count] : fallbacks)
      reasons += fmt::format("{}{} x {}", reasons.empty() ? "" : "; ", count, reason);
    return report_error(
        "speculative prefill was not applied in every run (those rows are full prefills): " +
        reasons);
  }
  return 0;
}

}  // namespace

std::function<int()> add_bench_ttft_command(CLI::App& bench) {
  auto flags = std::make_shared<BenchTtftFlags>();
  CLI::App* ttft =
      bench.add_subcommand("ttft", "time to first token: full prefill vs speculative prefill");
  flags->model.add_to(*ttft);
  flags->draft.add_to(*ttft);
  add_specprefill_tuning(*ttft, flags->settings);
  ttft->add_option("--lengths", flags->lengths, "prompt lengths, e.g. 1024,2048,4096,8192")
      ->delimiter(',');
  ttft->add_option("--keep", flags->keeps, "keep fractions, e.g. 0.1,0.2,0.3,0.5,1.0")
      ->delimiter(',');
  ttft->add_option("--repeats", flags->repeats, "measurements per point (the median is reported)");
  ttft->add_option("--seed", flags->seed, "prompt seed");
  ttft->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens,
                   "prefill chunk (step token budget)")
      ->check(CLI::PositiveNumber);
  ttft->add_option("--out", flags->out_prefix, "output prefix for the CSV / PNG files");
  return [flags] { return run_bench_ttft(*flags); };
}

}  // namespace specstack::cli

// specstack bench spec: speculative decoding against plain decoding, measured
// in one run on the same target and draft, beside the throughput model's
// prediction (specdecode/throughput_model.h, seed 003).
//
// Per context length L and batch B it first times the model's pieces
// directly on the ModelRunner: a plain decode step T(B, 1), a verify step
// T(B, k + 1) and a draft step D(B) (dense: the draft's context is L; sparse:
// sink + window), on sequences whose KV slots are reserved but not computed
// (a step's time does not depend on the values). Then it runs the serving
// Engine: B requests of L prompt tokens decoding --gen tokens, plainly and
// with speculation, and reports decode tokens/s after every request has its
// first token. Predicted multiplier: tau(alpha, k) * S / (k D + T(B, k + 1) +
// S - T(B, 1)), where S is the measured plain engine step (so the engine's
// own per-step overhead is in both). With --alpha the verification outcome
// is drawn from Bernoulli(alpha) (EMULATED: for dummy weights, whose
// acceptance means nothing); without it the draft's real acceptance counts.
// "Predicted run" is the model of the whole timed run (specdecode/
// batch_run_model.h): per-request step counts simulated from alpha and k, each
// step costed at the batch still running (costs interpolated between batch 1
// and B; with --alpha the step's first draft forward timed at its catch-up
// rows, B (1 + alpha^k)), plus the draft's admission step's excess measured
// in the run.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "cli/bench_spec_measure.h"
#include "cli/bench_util.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "engine/engine.h"
#include "specdecode/batch_run_model.h"
#include "specdecode/throughput_model.h"

namespace specstack::cli {
namespace {

struct BenchSpecFlags {
  ModelFlags model;
  DraftModelFlags draft;
  std::vector<int32_t> batches = {1, 8};
  std::vector<int64_t> contexts = {1024};
  std::vector<int32_t> ks = {4};
  std::vector<double> alphas;  // empty: the draft's real acceptance
  std::vector<std::string> draft_kv = {"dense"};
  int32_t window = 64;
  int32_t sink = 4;
  int32_t gen = 64;
  int32_t repeats = 3;
  int32_t max_num_batched_tokens = 2048;
  bool model_only = false;  // costs and predictions only, no engine runs
  bool adaptive = false;    // the engine's k policy (up to --k) instead of a fixed k
  uint32_t seed = 1;
  std::string out_prefix = "bench_spec";
  std::string json_schema;    // every request constrained by this schema (plain and speculative)
  std::string tokenizer_dir;  // its vocabulary (default: --model)
};

// alpha whose expected accepted tokens per verification at k is `mean` (bisection).
double alpha_from_mean_accepted(double mean, int32_t k) {
  double lo = 0, hi = 1;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (expected_accepted(mid, k) < mean ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

struct Row {
  int64_t context = 0;
  int32_t batch = 0;
  std::string draft_kv;
  int32_t k = 0;
  std::string alpha_label;  // "0.80 (emulated)" or "real"
  double alpha = 0;         // the one the prediction uses
  double t1 = 0, tk = 0, d = 0;
  double plain_tps = 0, spec_tps = 0, plain_step = 0;
  double predicted = 0, measured = 0;
  // The model at the acceptance the run realized (emulated draws are finite):
  // this checks the cost model alone.
  double predicted_realized = 0;
  double mean_accepted = 0;
  // The batch-run model (wall clock of the timed run: drain tail, admission).
  double predicted_run = 0, predicted_run_steps = 0;
  StepBreakdown plain_steps, spec_steps;  // the last run of each
  // The draft's prefix cache over the speculative runs (all repeats).
  int64_t draft_query_tokens = 0, draft_hit_tokens = 0, draft_evictions = 0;
};

Status validate(const BenchSpecFlags& f) {
  if (!f.draft.has_draft())
    return make_error("bench spec needs --draft DIR (or --dummy-weights --draft-config F)");
  SS_TRY(f.draft.validate(f.model));
  for (int32_t b : f.batches)
    if (b < 1) return errorf("--batch: {} is not >= 1", b);
  for (int64_t c : f.contexts)
    if (c < 2) return errorf("--context: {} is too short", c);
  for (int32_t k : f.ks)
    if (k < 1 || k > kMaxSpecTokens) return errorf("--k: {} is not in [1, {}]", k, kMaxSpecTokens);
  for (double a : f.alphas)
    if (!(a >= 0 && a <= 1)) return errorf("--alpha: {} is not in [0, 1]", a);
  for (const std::string& kind : f.draft_kv)
    if (kind != "dense" && kind != "sparse")
      return errorf("--draft-kv: '{}' is not dense or sparse", kind);
  if (f.window < 1 || f.sink < 0) return make_error("--window must be >= 1 and --sink >= 0");
  if (f.gen < 2) return errorf("--gen must be >= 2, got {}", f.gen);
  if (f.repeats < 1) return errorf("--repeats must be >= 1, got {}", f.repeats);
  return Status::ok_status();
}

void print_table(const std::vector<Row>& rows) {
  std::printf(
      "| context | batch | draft KV | k | alpha | T(B,1) ms | T(B,k+1) ms | D(B) ms | plain tok/s "
      "| "
      "spec tok/s | measured x | predicted x (steady step) | predicted x at realized acceptance | "
      "pred/meas | predicted run x (drain + admission) | run pred/meas | spec steps: predicted / "
      "engine | accepted/verify |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf(
        "| %lld | %d | %s | %d | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.2fx | %.2fx | %.2fx | "
        "%s | %.2fx | %s | %.1f / %d | %.2f |\n",
        static_cast<long long>(r.context), r.batch, r.draft_kv.c_str(), r.k, r.alpha_label.c_str(),
        r.t1 * 1e3, r.tk * 1e3, r.d * 1e3, r.plain_tps, r.spec_tps, r.measured, r.predicted,
        r.predicted_realized,
        r.measured > 0 ? fmt::format("{:.2f}", r.predicted_realized / r.measured).c_str() : "-",
        r.predicted_run,
        r.measured > 0 ? fmt::format("{:.2f}", r.predicted_run / r.measured).c_str() : "-",
        r.predicted_run_steps, r.spec_steps.n_decode_steps, r.mean_accepted);
  }
}

int run_bench_spec(const BenchSpecFlags& f) {
  if (Status status = validate(f); !status.ok()) return report_error(status.message());
  const int64_t max_context = *std::max_element(f.contexts.begin(), f.contexts.end());
  const int32_t max_batch = *std::max_element(f.batches.begin(), f.batches.end());
  const int32_t max_k = *std::max_element(f.ks.begin(), f.ks.end());
  // Every request's prompt, generation and draft tokens, plus a block of slack each.
  const int64_t kv_tokens =
      max_batch * (max_context + f.gen + max_k + 2 + 2 * f.model.block_size) + 4096;
  auto options = f.model.instance_options(kv_tokens);
  if (!options.ok()) return report_error(options.message());
  options->graph_max_context = max_context + f.gen + max_k + 2;
  options->max_tokens_per_step = std::max<int64_t>(
      f.max_num_batched_tokens, static_cast<int64_t>(max_batch) * (max_k + 1) + 64);
  auto config =
      load_model_config(options->config_path.empty() ? options->model_dir : options->config_path);
  if (!config.ok()) return report_error(config.message());
  if (auto draft_config = load_draft_config(f.draft, *config); !draft_config.ok())
    return report_error(draft_config.message());
  CpuBackend backend(CpuBackendOptions{f.model.threads});
  auto target = ModelInstance::create(*options, backend);
  if (!target.ok()) return report_error(target.message());
  // The draft's pool holds every prompt's prefix blocks too (the runs reuse
  // them), plus a window's worth per sequence: a sparse draft's rolled-back
  // draft blocks return at the free queue's tail, so with ~2 spare blocks a
  // sequence its appends soon pop the cached prompt blocks it dropped, and
  // the next run prefills those prompts on the draft again (seen at batch 64,
  // 8K: 30,462 evictions, 8,288 draft tokens a step). 12 KB a token for the
  // 0.5B: 0.8 GB at batch 64.
  const int64_t draft_kv_tokens = kv_tokens + static_cast<int64_t>(max_batch) * 1024;
  auto draft =
      load_draft_model(f.draft, f.model, draft_kv_tokens, options->max_tokens_per_step, backend);
  if (!draft.ok()) return report_error(draft.message());
  auto describe = [](ModelInstance& m) {
    const ModelConfig& c = m.config();
    return fmt::format("{}, {} layers, hidden {}, {:.1f} MiB", architecture_name(c.arch),
                       c.n_layers, c.hidden_size, m.model().weight_bytes() / 1048576.0);
  };
  std::fprintf(stderr, "bench spec: target %s; draft %s; %s acceptance\n",
               describe(**target).c_str(), describe(**draft).c_str(),
               f.alphas.empty() ? "real" : "EMULATED (Bernoulli)");
  const int64_t vocab = std::min((*target)->config().vocab_size, (*draft)->config().vocab_size);
  std::shared_ptr<grammar::TokenConstraint> constraint;
  if (!f.json_schema.empty()) {
    const std::string dir = f.tokenizer_dir.empty() ? f.model.model_dir : f.tokenizer_dir;
    if (dir.empty()) return report_error("--json-schema needs a tokenizer: --model or --tokenizer");
    auto loaded = load_schema_constraint(f.json_schema, dir);
    if (!loaded.ok()) return report_error(loaded.message());
    constraint = *std::move(loaded);
    std::fprintf(stderr, "bench spec: every request constrained by %s\n", f.json_schema.c_str());
  }

  std::vector<Row> rows;
  for (int64_t context : f.contexts) {
    for (int32_t batch : f.batches) {
      std::vector<std::vector<int32_t>> prompts;
      for (int32_t i = 0; i < batch; ++i)
        prompts.push_back(seeded_prompt(f.seed, context, i, vocab));
      const double t1 = time_step(**target, batch, context, 1, f.repeats);
      // Every ModelRunner timing comes before the engine runs: time_step
      // reserves batch x context slots, which evicts the prefix caches the
      // engine runs rely on (warmed below). Timed between the runs (as
      // before 2026-11-24 evening), it left the sparse draft runs prefilling
      // evicted prompts on the draft inside the measured decode.
      std::map<std::string, double> draft_step;  // D(B) per draft KV kind
      // The draft's KV per sequence: a sparse draft holds sink + window (+ a block).
      auto draft_context_of = [&](const std::string& kind) {
        return kind == "sparse"
                   ? std::min<int64_t>(context, f.window + f.model.block_size +
                                                    (f.sink + f.model.block_size - 1) /
                                                        f.model.block_size * f.model.block_size)
                   : context;
      };
      for (const std::string& kind : f.draft_kv) {
        const int64_t draft_context = draft_context_of(kind);
        draft_step[kind] = time_step(**draft, batch, draft_context, 1, f.repeats);
        // Diagnostic: the same draft step right after a target verify step,
        // as in the engine's loop (a heavy step before it may leave the GPU
        // clocked lower, or the caches cold).
        ProbeStep verify(**target, batch, context, f.ks.back() + 1);
        const double after =
            ProbeStep(**draft, batch, draft_context, 1).time(f.repeats, [&] { verify.run(); });
        // And at the engine's positions (a sparse draft's sit far past its
        // slots), then also with each sequence's blocks a prompt apart.
        const ProbeLayout engine_like{context - draft_context, context - draft_context};
        const double positioned =
            ProbeStep(**draft, batch, draft_context, 1, ProbeLayout{engine_like.position_offset, 0})
                .time(f.repeats);
        const double spread =
            ProbeStep(**draft, batch, draft_context, 1, engine_like).time(f.repeats);
        std::printf(
            "ss draft_step L=%lld B=%d kv=%s alone_ms=%.3f after_verify_ms=%.3f "
            "engine_positions_ms=%.3f engine_positions_spread_ms=%.3f\n",
            static_cast<long long>(context), batch, kind.c_str(), draft_step[kind] * 1e3,
            after * 1e3, positioned * 1e3, spread * 1e3);
      }
      // The batch-run model's costs at batch 1 (a draining batch ends with
      // few sequences): D(1) per draft KV kind and T(1, k + 1).
      std::map<std::string, double> draft_step_one;
      std::map<std::tuple<std::string, double, int32_t>, double> first_draft;  // (kind, alpha, k)
      std::map<int32_t, double> verify_step_one;
      for (const std::string& kind : f.draft_kv) {
        const int64_t draft_context = draft_context_of(kind);
        draft_step_one[kind] =
            batch > 1 ? time_step(**draft, 1, draft_context, 1, f.repeats) : draft_step[kind];
        // The first draft forward of a step at an emulated alpha: one row per
        // sequence plus a second for the alpha^k that accepted all k drafts
        // (the engine lays them out one per entry, as decode rows).
        for (double alpha : f.alphas) {
          for (int32_t k : f.ks) {
            const auto rows = static_cast<int32_t>(std::lround(batch * (1.0 + std::pow(alpha, k))));
            // (Not where the rows' KV would overflow the draft's pool: dense
            // at long contexts; the model then uses D(B) for it.)
            const bool fits = int64_t{rows} * (draft_context + 2 * f.model.block_size) <=
                              draft_kv_tokens - batch * f.model.block_size;
            if (rows == batch || !fits) continue;
            first_draft[std::make_tuple(kind, alpha, k)] =
                time_step(**draft, rows, draft_context, 1, f.repeats);
          }
        }
      }
      // T(B, k' + 1) for k' = 1..k (adaptive: the policy may pick any) or k alone.
      std::map<int32_t, std::vector<double>> verify_steps;
      for (int32_t k : f.ks) {
        if (verify_steps.contains(k)) continue;  // --k listed twice
        for (int32_t kk = f.adaptive ? 1 : k; kk <= k; ++kk)
          verify_steps[k].push_back(time_step(**target, batch, context, kk + 1, f.repeats));
      }
      for (const auto& [k, tks] : verify_steps) {
        for (size_t i = 0; i < tks.size(); ++i) {
          const auto kk = static_cast<int32_t>(tks.size() == 1 ? k : int32_t(i) + 1);
          if (!verify_step_one.contains(kk))
            verify_step_one[kk] =
                batch > 1 ? time_step(**target, 1, context, kk + 1, f.repeats) : tks[i];
        }
      }
      EngineOptions plain_options;
      plain_options.max_num_batched_tokens = f.max_num_batched_tokens;
      plain_options.max_num_seqs = std::max(batch, 1);
      DecodeRun plain;
      if (!f.model_only) {
        // Once for the prefix cache (the spec runs reuse the prompts' KV), then measured.
        std::vector<double> tps, steps;
        for (int32_t r = 0; r <= f.repeats; ++r) {
          auto run = run_decode(**target, plain_options, prompts, f.gen, constraint);
          if (!run.ok()) return report_error(run.message());
          if (r == 0) continue;
          tps.push_back(run->tokens_per_second);
          steps.push_back(run->step_seconds);
          plain.steps = run->steps;
        }
        plain.tokens_per_second = median(tps);
        plain.step_seconds = median(steps);
        // The draft's prefix cache too, so its catch-up is a hit.
        EngineOptions warm = plain_options;
        if (auto run = run_decode(**draft, warm, prompts, 2); !run.ok())
          return report_error(run.message());
      }
      for (const std::string& kind : f.draft_kv) {
        const bool sparse = kind == "sparse";
        const double d = draft_step[kind];
        for (int32_t k : f.ks) {
          // The policy may pick any k' <= k: its best case is the best fixed k'.
          const std::vector<double>& tks = verify_steps[k];
          const double tk = tks.back();
          std::vector<double> alpha_list = f.alphas;
          if (alpha_list.empty()) alpha_list.push_back(-1);
          for (double alpha : alpha_list) {
            Row row;
            row.context = context;
            row.batch = batch;
            row.draft_kv = f.adaptive ? kind + ", adaptive k <= K" : kind;
            row.k = k;
            row.t1 = t1;
            row.tk = tk;
            row.d = d;
            row.plain_tps = plain.tokens_per_second;
            row.plain_step = plain.step_seconds;
            row.plain_steps = plain.steps;
            if (!f.model_only) {
              EngineOptions spec = plain_options;
              spec.specdecode.draft = draft->get();
              spec.specdecode.max_draft_tokens = k;
              spec.specdecode.adaptive = f.adaptive;
              spec.specdecode.emulated_acceptance = alpha;
              spec.specdecode.emulation_seed = f.seed;
              if (sparse) {
                spec.specdecode.draft_window = f.window;
                spec.specdecode.draft_sink = f.sink;
              }
              std::vector<double> tps;
              int64_t accepted = 0, verifications = 0;
              for (int32_t r = 0; r < f.repeats; ++r) {
                // Fresh Bernoulli draws per repeat, so the repeats average them.
                spec.specdecode.emulation_seed = f.seed * 1000003ull + static_cast<uint64_t>(r);
                auto run = run_decode(**target, spec, prompts, f.gen, constraint);
                if (!run.ok()) return report_error(run.message());
                tps.push_back(run->tokens_per_second);
                accepted += run->accepted;
                verifications += run->verifications;
                row.spec_steps = run->steps;
                row.draft_query_tokens += run->draft_query_tokens;
                row.draft_hit_tokens += run->draft_hit_tokens;
                row.draft_evictions += run->draft_evictions;
              }
              row.spec_tps = median(tps);
              row.measured = row.spec_tps / row.plain_tps;
              row.mean_accepted = verifications > 0 ? static_cast<double>(accepted) /
                                                          static_cast<double>(verifications)
                                                    : 0;
            }
            row.alpha = alpha >= 0 ? alpha : alpha_from_mean_accepted(row.mean_accepted, k);
            row.alpha_label = alpha >= 0 ? fmt::format("{:.2f} emulated", alpha)
                                         : fmt::format("{:.2f} real", row.alpha);
            SpecStepCosts costs;
            costs.draft_step_seconds = d;
            costs.verify_step_seconds = tk;
            // Plain engine step per sequence-token S: the model's step plus the
            // engine's own overhead, which a speculative step pays too.
            costs.target_step_seconds = f.model_only ? t1 : std::max(plain.step_seconds, t1);
            costs.overhead_seconds = f.model_only ? 0 : std::max(0.0, plain.step_seconds - t1);
            row.predicted = predicted_multiplier(row.alpha, k, costs);
            row.predicted_realized = f.model_only ? row.predicted
                                                  : row.predicted * (1.0 + row.mean_accepted) /
                                                        expected_tokens_per_step(row.alpha, k);
            if (f.adaptive) {
              // The best of plain decoding (1x) and every fixed k' <= K.
              row.predicted = 1.0;
              for (size_t i = 0; i < tks.size(); ++i) {
                costs.verify_step_seconds = tks[i];
                row.predicted =
                    std::max(row.predicted,
                             predicted_multiplier(row.alpha, static_cast<int32_t>(i) + 1, costs));
              }
              row.predicted_realized = row.predicted;  // k varies: no single realized tau
            }
            // The whole run: at the fixed k, or (adaptive) at the best fixed k'.
            int32_t run_k = k;
            double best_fixed = 0;
            if (f.adaptive) {
              for (size_t i = 0; i < tks.size(); ++i) {
                costs.verify_step_seconds = tks[i];
                const double m = predicted_multiplier(row.alpha, int32_t(i) + 1, costs);
                if (m > best_fixed) {
                  best_fixed = m;
                  run_k = int32_t(i) + 1;
                }
              }
            }
            BatchRunInputs run;
            run.batch = batch;
            run.tokens_per_request = f.gen - 1;  // after each request's first token
            run.alpha = row.alpha;
            run.k = run_k;
            run.at_batch = costs;
            run.at_batch.verify_step_seconds =
                f.adaptive ? tks[size_t(run_k - 1)] : tk;  // T(B, run_k + 1)
            run.at_one.draft_step_seconds = draft_step_one[kind];
            run.at_one.verify_step_seconds = verify_step_one[run_k];
            run.plain_step_seconds = costs.target_step_seconds;
            run.admission_seconds = row.spec_steps.admission_excess * 1e-3;
            if (auto it = first_draft.find(std::make_tuple(kind, alpha, run_k));
                it != first_draft.end()) {
              run.first_draft_at_batch = it->second;
              run.first_draft_at_one = draft_step_one[kind];
            }
            run.seed = f.seed;
            const BatchRunPrediction predicted_run = predict_batch_run(run);
            // Adaptive where no k pays: the policy decodes plainly.
            row.predicted_run = f.adaptive && best_fixed <= 1.0 ? 1.0 : predicted_run.multiplier;
            row.predicted_run_steps = predicted_run.mean_steps;
            std::fprintf(stderr,
                         "bench spec: L %lld B %d %s k %d alpha %s: plain %.1f tok/s, spec %.1f "
                         "tok/s (%.2fx), predicted %.2fx\n",
                         static_cast<long long>(context), batch, kind.c_str(), k,
                         row.alpha_label.c_str(), row.plain_tps, row.spec_tps, row.measured,
                         row.predicted);
            rows.push_back(row);
          }
        }
      }
    }
  }
  std::ofstream csv(f.out_prefix + ".csv");
  csv << "context,batch,draft_kv,k,alpha,emulated,t1_s,tk_s,d_s,plain_tps,spec_tps,measured,"
         "predicted,predicted_realized,mean_accepted,"
         "predicted_run,predicted_run_steps,engine_steps,admission_excess_ms\n";
  for (const Row& r : rows) {
    csv << fmt::format(
        "{},{},{},{},{:.4f},{},{:.6f},{:.6f},{:.6f},{:.2f},{:.2f},{:.4f},{:.4f},{:.4f},{:.3f},"
        "{:.4f},{:.1f},{},{:.2f}\n",
        r.context, r.batch, r.draft_kv, r.k, r.alpha, f.alphas.empty() ? 0 : 1, r.t1, r.tk, r.d,
        r.plain_tps, r.spec_tps, r.measured, r.predicted, r.predicted_realized, r.mean_accepted,
        r.predicted_run, r.predicted_run_steps, r.spec_steps.n_decode_steps,
        r.spec_steps.admission_excess);
  }
  std::fprintf(stderr, "bench spec: wrote %s.csv\n", f.out_prefix.c_str());
  print_table(rows);
  if (!f.model_only) {
    std::printf(
        "\nWhere an engine step's time goes (ms, mean over the last run's steady decode steps: "
        "every sequence emits, no prompt rows): step = draft proposals (of which the first, "
        "catch-up, forward, and the host's work outside the draft forwards: of that, before the "
        "first) + schedule + target "
        "forward + rest (verification, sampling, "
        "emission) (+ the loop's time between steps) [steps, tokens the draft forwarded per "
        "step: k per sequence when nothing is left to catch up]\n\n");
    std::printf(
        "| context | batch | draft KV | k | alpha | plain step | speculative step | draft prefix "
        "cache: hit / queried tokens, evictions (all repeats) |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
      std::printf("| %lld | %d | %s | %d | %s | %s | %s | %lld / %lld, %lld |\n",
                  static_cast<long long>(r.context), r.batch, r.draft_kv.c_str(), r.k,
                  r.alpha_label.c_str(), r.plain_steps.str().c_str(), r.spec_steps.str().c_str(),
                  static_cast<long long>(r.draft_hit_tokens),
                  static_cast<long long>(r.draft_query_tokens),
                  static_cast<long long>(r.draft_evictions));
    }
  }
  // One grep-able line per point (bench/device.sh's summary picks up "ss ..." lines).
  for (const Row& r : rows) {
    std::printf(
        "ss spec L=%lld B=%d kv=%s k=%d alpha=%.2f%s plain_tok_s=%.1f spec_tok_s=%.1f "
        "measured=%.3f predicted=%.3f predicted_realized=%.3f predicted_run=%.3f "
        "accepted_per_verify=%.2f\n",
        static_cast<long long>(r.context), r.batch, r.draft_kv.c_str(), r.k, r.alpha,
        f.alphas.empty() ? "" : "(emulated)", r.plain_tps, r.spec_tps, r.measured, r.predicted,
        r.predicted_realized, r.predicted_run, r.mean_accepted);
  }
  std::printf(
      "\nT, D: one forward on the ModelRunner (median of %d); plain/spec tok/s: the Engine's "
      "decode "
      "throughput (median of %d); predicted = tau(alpha,k) * S / (k D + T(B,k+1) + S - T(B,1)), "
      "S = measured plain engine step (the steady step's model); predicted run = the same costs "
      "over a simulated run (each request's steps drawn from alpha and k, each step costed at the "
      "batch still running, linear between batch 1 and B, plus the admission step's measured "
      "excess)%s\n",
      f.repeats, f.repeats,
      f.alphas.empty() ? "" : "; acceptance EMULATED: Bernoulli(alpha) per draft token");
  return 0;
}

}  // namespace

std::function<int()> add_bench_spec_command(CLI::App& bench) {
  auto flags = std::make_shared<BenchSpecFlags>();
  CLI::App* spec = bench.add_subcommand(
      "spec", "speculative vs plain decoding, measured and predicted by the throughput model");
  flags->model.add_to(*spec);
  flags->draft.add_to(*spec);
  spec->add_option("--batch", flags->batches, "batch sizes, e.g. 1,8,32")->delimiter(',');
  spec->add_option("--context", flags->contexts, "prompt lengths, e.g. 1024,8192")->delimiter(',');
  spec->add_option("--k", flags->ks, "draft tokens per step, e.g. 2,4,8")->delimiter(',');
  spec->add_option("--alpha", flags->alphas,
                   "EMULATED acceptance rates (benchmark only); omit for the draft's real one")
      ->delimiter(',');
  spec->add_option("--draft-kv", flags->draft_kv, "dense,sparse")->delimiter(',');
  spec->add_option("--window", flags->window, "sparse draft KV window (tokens)");
  spec->add_option("--sink", flags->sink, "sparse draft KV sink (tokens)");
  spec->add_option("--gen", flags->gen, "tokens generated per request");
  spec->add_option("--repeats", flags->repeats, "measurements per point (median)");
  spec->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens, "step token budget")
      ->check(CLI::PositiveNumber);
  spec->add_flag("--adaptive", flags->adaptive,
                 "run the engine's adaptive k policy (k in 0..K per step) instead of a fixed K; "
                 "predicted = the best of plain and every fixed k <= K");
  spec->add_flag("--model-only", flags->model_only,
                 "time the steps and predict; skip the engine runs");
  spec->add_option("--seed", flags->seed, "prompt and emulation seed");
  spec->add_option("--out", flags->out_prefix, "output prefix for the CSV");
  spec->add_option("--json-schema", flags->json_schema,
                   "constrain every request (plain and speculative) by this JSON schema file");
  spec->add_option("--tokenizer", flags->tokenizer_dir,
                   "tokenizer folder for --json-schema (default: --model)");
  return [flags] { return run_bench_spec(*flags); };
}

}  // namespace specstack::cli

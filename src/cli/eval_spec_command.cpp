// specstack eval spec: the real acceptance of speculative decoding on a
// draft/target pair (the eval pair in ../shared/evalmodels), on story
// continuations and needle-retrieval prompts built like `eval needle`'s.
//
// For every temperature and SpecPrefill setting it runs every prompt once
// plainly through the serving Engine (the baseline), then once per draft KV
// kind (dense, sparse) and K with speculative decoding at a fixed K (or, with
// --adaptive, the engine's k policy up to K), and
// reports per run: the acceptance rate alpha (story, needle, all), the mean
// accepted length per verification, the tokens per target step, at
// temperature 0 how many outputs are token for token the plain ones (they
// must all be: greedy speculation is exact), and wall time against the
// baseline. Prefix caches are warmed first (the target's except with
// SpecPrefill, which must prefill sparsely), so the wall ratios mostly
// measure decoding.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "cli/eval_prompts.h"
#include "engine/engine.h"

namespace specstack::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct EvalSpecFlags {
  ModelFlags model;
  std::string draft_dir;
  std::string draft_quantization = "none";  // --draft-quantization none|fp8
  std::string filler_model = "models/tinystories-656k";
  int32_t n = 100;              // prompts per task
  int32_t story_context = 256;  // story prompt length (tokens)
  int32_t context = 1024;       // needle prompt length (tokens)
  std::vector<int32_t> ks = {2, 4, 8};
  std::vector<double> temperatures = {0.0, 0.8};
  std::vector<std::string> specprefill = {"off", "on"};
  std::vector<std::string> draft_kv = {"dense", "sparse"};
  int32_t window = 256;
  int32_t sink = 32;
  double keep = 0.2;
  int32_t gen = 64;
  int32_t batch = 16;
  bool adaptive = false;  // the engine's k policy (k in 0..K per step) instead of a fixed K
  uint32_t seed = 2024;
  std::string out_prefix = "eval_spec";
};

struct Prompt {
  std::vector<int32_t> ids;
  bool needle = false;
};

// One Engine run over every prompt.
struct RunResult {
  std::vector<std::vector<int32_t>> outputs;  // per prompt
  double seconds = 0;
  int64_t drafted[2] = {0, 0};  // [story, needle]
  int64_t accepted[2] = {0, 0};
  int64_t verifications = 0;
  int64_t specprefill_applied = 0;
};

struct RunConfig {
  double temperature = 0;
  bool specprefill = false;
  int32_t k = 0;  // 0: plain decoding
  bool sparse = false;
};

Result<RunResult> run_all(ModelInstance& target, ModelInstance& draft,
                          const std::vector<Prompt>& prompts, const RunConfig& run,
                          const EvalSpecFlags& f) {
  EngineOptions options;
  options.max_num_seqs = f.batch;
  options.max_queue = static_cast<int32_t>(prompts.size()) + 1;
  // SpecPrefill scores only what the target's prefix cache misses: off, so
  // every prompt is prefilled sparsely as a fresh one would be.
  options.enable_prefix_caching = !run.specprefill;
  if (run.specprefill) {
    options.specprefill.draft = &draft;
    options.specprefill.keep_pct = f.keep;
    options.specprefill.threshold = 0;
  }
  if (run.k > 0) {
    options.specdecode.draft = &draft;
    options.specdecode.max_draft_tokens = run.k;
    options.specdecode.adaptive = f.adaptive;
    if (run.sparse) {
      options.specdecode.draft_window = f.window;
      options.specdecode.draft_sink = f.sink;
    }
  }
  Engine engine(target, options);
  const EngineMetrics before = engine.metrics();
  const auto start = SteadyClock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams params;
    params.temperature = static_cast<float>(run.temperature);
    params.seed = f.seed + static_cast<uint64_t>(i);
    params.max_tokens = f.gen;
    params.ignore_eos = true;
    RequestOptions request{prompts[i].ids, params, 1, -1};
    request.specprefill.enabled = run.specprefill;
    request.specdecode.enabled = run.k > 0;
    SS_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.submit(std::move(request)));
    streams.push_back(std::move(stream));
  }
  RunResult result;
  result.outputs.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    while (!streams[i]->done()) {
      auto event = streams[i]->next(std::chrono::milliseconds(1000));
      if (event)
        result.outputs[i].insert(result.outputs[i].end(), event->tokens.begin(),
                                 event->tokens.end());
    }
    const RequestStats stats = streams[i]->stats();
    const int task = prompts[i].needle ? 1 : 0;
    result.drafted[task] += stats.speculative.draft_tokens;
    result.accepted[task] += stats.speculative.accepted_tokens;
    result.specprefill_applied += stats.specprefill.applied ? 1 : 0;
    if (static_cast<int32_t>(result.outputs[i].size()) != f.gen) {
      return errorf("prompt {} produced {} tokens, not {}", i, result.outputs[i].size(), f.gen);
    }
  }
  result.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  // The loop publishes metrics after each step: wait for the last one.
  EngineMetrics after = engine.metrics();
  for (int i = 0; i < 1000 && after.requests_finished_total - before.requests_finished_total <
                                  static_cast<int64_t>(prompts.size());
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    after = engine.metrics();
  }
  result.verifications = after.specdecode_verify_total - before.specdecode_verify_total;
  return result;
}

double ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
}

struct Row {
  RunConfig config;
  RunResult result;
  int32_t identical = -1;  // greedy: outputs equal to the plain run's (-1: sampled)
  double wall_ratio = 0;   // plain seconds / this run's seconds
};

std::string row_line(const Row& row, size_t n_prompts) {
  const RunResult& r = row.result;
  const int64_t drafted = r.drafted[0] + r.drafted[1];
  const int64_t accepted = r.accepted[0] + r.accepted[1];
  return fmt::format(
      "| {} | {} | {:.1f} | {} | {:.3f} | {:.3f} | {:.3f} | {:.2f} | {:.2f} | {} | {:.2f}x |",
      row.config.specprefill ? "on" : "off", row.config.sparse ? "sparse" : "dense",
      row.config.temperature, row.config.k, ratio(r.accepted[0], r.drafted[0]),
      ratio(r.accepted[1], r.drafted[1]), ratio(accepted, drafted),
      ratio(accepted, r.verifications), ratio(accepted + r.verifications, r.verifications),
      row.identical < 0 ? std::string("-") : fmt::format("{}/{}", row.identical, n_prompts),
      row.wall_ratio);
}

Status validate(const EvalSpecFlags& f) {
  if (f.draft_dir.empty()) return make_error("--draft is required");
  SS_TRY(draft_weight_quantization(f.draft_quantization, f.model));
  for (int32_t k : f.ks)
    if (k < 1 || k > 16) return errorf("--k: {} is not in [1, 16]", k);
  for (double t : f.temperatures)
    if (!(t >= 0)) return errorf("--temperature: {} is not >= 0", t);
  for (const std::string& s : f.specprefill)
    if (s != "off" && s != "on") return errorf("--specprefill: '{}' is not off or on", s);
  for (const std::string& s : f.draft_kv)
    if (s != "dense" && s != "sparse") return errorf("--draft-kv: '{}' is not dense or sparse", s);
  if (!(f.keep > 0 && f.keep <= 1)) return errorf("--keep must be in (0, 1], got {}", f.keep);
  if (f.window < 1 || f.sink < 0) return make_error("--window must be >= 1 and --sink >= 0");
  if (!std::filesystem::exists(f.filler_model + "/config.json"))
    return errorf("filler model {} not found (--filler-model DIR)", f.filler_model);
  return Status::ok_status();
}

int run_eval_spec(const EvalSpecFlags& f) {
  if (Status status = validate(f); !status.ok()) return report_error(status.message());
  auto tokenizer = Tokenizer::load_dir(f.model.model_dir);
  if (!tokenizer.ok()) return report_error(tokenizer.message());
  const int32_t longest = std::max(f.context, f.story_context);
  auto filler = make_filler(
      f.filler_model, f.model.threads,
      static_cast<size_t>(longest) * 24 + static_cast<size_t>(f.story_context) * 8 * f.n, f.seed);
  if (!filler.ok()) return report_error(filler.message());

  std::vector<Prompt> prompts;
  std::mt19937 rng(f.seed + 1);
  for (int32_t i = 0; i < f.n; ++i) {
    prompts.push_back(
        {tokenizer->encode(filler_slice(*filler, *tokenizer, f.story_context, rng), true), false});
  }
  for (EvalCase& c :
       needle_cases(*tokenizer, *filler, {0.1, 0.5, 0.9}, (f.n + 2) / 3, f.context, f.seed)) {
    if (static_cast<int32_t>(prompts.size()) >= 2 * f.n) break;
    prompts.push_back({std::move(c.ids), true});
  }
  int64_t prompt_tokens = 0;
  for (const Prompt& p : prompts) prompt_tokens += static_cast<int64_t>(p.ids.size());

  // Room for every prompt in the prefix caches plus the running batch.
  const int32_t max_k = *std::max_element(f.ks.begin(), f.ks.end());
  const int64_t kv_tokens =
      prompt_tokens + static_cast<int64_t>(f.batch) * (longest + f.gen + max_k + 64) + 4096;
  auto options = f.model.instance_options(kv_tokens);
  if (!options.ok()) return report_error(options.message());
  CpuBackend backend(CpuBackendOptions{f.model.threads});
  auto target = ModelInstance::create(*options, backend);
  if (!target.ok()) return report_error(target.message());
  ModelInstanceOptions draft_options = *options;
  draft_options.model_dir = f.draft_dir;
  draft_options.config_path.clear();
  // --quantization is the target's (ModelFlags); the draft has its own
  // (checked by validate()).
  draft_options.quantization = draft_weight_quantization(f.draft_quantization, f.model).value();
  auto draft = ModelInstance::create(draft_options, backend);
  if (!draft.ok()) return report_error(draft.message());
  if ((*draft)->config().vocab_size != (*target)->config().vocab_size)
    return report_error("the draft's vocabulary differs from the target's");
  std::fprintf(stderr,
               "specstack eval spec: target %s (%s), draft %s (%s); %zu prompts (%d story of ~%d "
               "tokens, %zu needle of ~%d), %d tokens each, batch %d\n",
               f.model.model_dir.c_str(), weight_format(f.model.quantization), f.draft_dir.c_str(),
               weight_format(f.draft_quantization), prompts.size(), f.n, f.story_context,
               prompts.size() - static_cast<size_t>(f.n), f.context, f.gen, f.batch);

  // Warm-up (not reported): the target's prefix cache, and the draft's
  // through one speculative run.
  for (const RunConfig warm : {RunConfig{0, false, 0, false}, RunConfig{0, false, 1, false}}) {
    if (auto r = run_all(**target, **draft, prompts, warm, f); !r.ok())
      return report_error(r.message());
  }

  std::vector<Row> rows;
  std::ofstream csv(f.out_prefix + ".csv");
  csv << "specprefill,draft_kv,temperature,k,drafted_story,accepted_story,drafted_needle,"
         "accepted_needle,verifications,identical,seconds,plain_seconds\n";
  for (const std::string& sp : f.specprefill) {
    for (double temperature : f.temperatures) {
      const RunConfig plain_config{temperature, sp == "on", 0, false};
      auto plain = run_all(**target, **draft, prompts, plain_config, f);
      if (!plain.ok()) return report_error(plain.message());
      if (plain_config.specprefill &&
          plain->specprefill_applied < static_cast<int64_t>(prompts.size()))
        return report_error("speculative prefill was not applied to every prompt");
      for (const std::string& kind : f.draft_kv) {
        for (int32_t k : f.ks) {
          Row row;
          row.config = RunConfig{temperature, sp == "on", k, kind == "sparse"};
          auto spec = run_all(**target, **draft, prompts, row.config, f);
          if (!spec.ok()) return report_error(spec.message());
          row.result = std::move(spec).value();
          if (temperature == 0) {
            row.identical = 0;
            for (size_t i = 0; i < prompts.size(); ++i)
              row.identical += row.result.outputs[i] == plain->outputs[i] ? 1 : 0;
          }
          row.wall_ratio = plain->seconds / row.result.seconds;
          const RunResult& r = row.result;
          csv << fmt::format("{},{},{},{},{},{},{},{},{},{},{:.3f},{:.3f}\n", sp, kind, temperature,
                             k, r.drafted[0], r.accepted[0], r.drafted[1], r.accepted[1],
                             r.verifications, row.identical, r.seconds, plain->seconds);
          std::fprintf(stderr, "%s\n", row_line(row, prompts.size()).c_str());
          rows.push_back(std::move(row));
        }
      }
    }
  }
  std::printf(
      "| SpecPrefill | draft KV | temp | K | alpha story | alpha needle | alpha | accepted/verify "
      "| tokens/target step | greedy == plain | wall vs plain |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) std::printf("%s\n", row_line(row, prompts.size()).c_str());
  std::printf(
      "\n%zu prompts x %d tokens per run; %s; sparse draft KV = sink %d + window %d tokens; "
      "SpecPrefill keep %.2f; wall vs plain = plain run seconds / speculative run seconds (same "
      "SpecPrefill setting and temperature, caches warm)\n",
      prompts.size(), f.gen, f.adaptive ? "adaptive k <= K" : "fixed K", f.sink, f.window, f.keep);
  int mismatched = 0;
  for (const Row& row : rows)
    if (row.identical >= 0 && row.identical < static_cast<int32_t>(prompts.size())) ++mismatched;
  if (mismatched > 0) {
    std::printf("greedy outputs that differ from plain decoding in %d runs\n", mismatched);
    return 1;
  }
  return 0;
}

}  // namespace

std::function<int()> add_eval_spec_command(CLI::App& eval) {
  auto flags = std::make_shared<EvalSpecFlags>();
  CLI::App* spec = eval.add_subcommand(
      "spec", "speculative decoding acceptance on story and needle prompts (real, not emulated)");
  flags->model.add_to(*spec);
  spec->add_option("--draft", flags->draft_dir, "draft model folder (same tokenizer)")->required();
  add_draft_quantization_option(*spec, flags->draft_quantization);
  spec->add_option("--filler-model", flags->filler_model, "model that writes the story filler");
  spec->add_option("--n", flags->n, "prompts per task (story, needle)")->check(CLI::PositiveNumber);
  spec->add_option("--story-context", flags->story_context, "story prompt length in tokens")
      ->check(CLI::Range(16, 1 << 20));
  spec->add_option("--context", flags->context, "needle prompt length in tokens")
      ->check(CLI::Range(64, 1 << 20));
  spec->add_option("--k", flags->ks, "draft tokens per step, e.g. 2,4,8")->delimiter(',');
  spec->add_option("--temperature", flags->temperatures, "e.g. 0,0.8")->delimiter(',');
  spec->add_option("--specprefill", flags->specprefill, "off,on")->delimiter(',');
  spec->add_option("--draft-kv", flags->draft_kv, "dense,sparse")->delimiter(',');
  spec->add_option("--window", flags->window, "sparse draft KV window (tokens)");
  spec->add_option("--sink", flags->sink, "sparse draft KV sink (tokens)");
  spec->add_option("--keep", flags->keep, "SpecPrefill keep fraction");
  spec->add_option("--gen", flags->gen, "tokens generated per prompt")->check(CLI::PositiveNumber);
  spec->add_option("--batch", flags->batch, "running sequences at once")
      ->check(CLI::PositiveNumber);
  spec->add_flag("--adaptive", flags->adaptive,
                 "the engine's adaptive k policy (k in 0..K per step, the serving default) "
                 "instead of a fixed K");
  spec->add_option("--seed", flags->seed, "prompt, filler and sampling seed");
  spec->add_option("--out", flags->out_prefix, "output prefix for the CSV");
  return [flags] { return run_eval_spec(*flags); };
}

}  // namespace specstack::cli

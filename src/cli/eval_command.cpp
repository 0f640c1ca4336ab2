// specstack eval needle|json|ppl: quality probes for speculative prefill.
// Each compares the target with a full prefill against the target prefilled
// only on the chunks the draft selected (kept tokens at their original
// positions, decoding from M), on prompts built from story filler (sampled
// from a small filler model, TinyStories by default, as the eval pair was
// trained on). Works on any model folder pair with the same tokenizer.
//   needle: "The secret code for <Name> is <7 digits>." at depths; greedy answer.
//   json:   a long JSON record array; "What is the city of <Name>?".
//   ppl:    perplexity of the last 64 tokens of a long text after full vs sparse prefill.
//   (`eval spec`, speculative decoding acceptance, is in eval_spec_command.cpp.)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "cli/eval_prompts.h"
#include "engine/generator.h"
#include "engine/specprefill_stage.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {
namespace {

struct EvalFlags {
  ModelFlags model;
  std::string draft_dir;
  std::string draft_quantization = "none";  // --draft-quantization none|fp8
  std::string filler_model = "models/tinystories-656k";
  std::vector<double> keeps = {0.1, 0.2, 0.3};
  std::vector<double> depths = {0.1, 0.5, 0.9};
  int32_t n = 30;
  int32_t context = 3072;
  uint32_t seed = 2024;
  int32_t lookahead = 8;
  int32_t chunk = 32;
};

const char* kCities[] = {"Paris", "Lima",  "Oslo",  "Cairo", "Tokyo",
                         "Quito", "Dakar", "Hanoi", "Perth", "Riga"};

std::vector<EvalCase> json_cases(const EvalFlags& f, const Tokenizer& tok) {
  std::mt19937 rng(f.seed);
  std::vector<EvalCase> cases;
  for (int32_t i = 0; i < f.n; ++i) {
    std::string records = "[";
    std::vector<std::pair<std::string, std::string>> people;
    for (int32_t r = 0;; ++r) {
      const std::string name = random_name(rng) + std::to_string(r);
      const std::string city = kCities[rng() % std::size(kCities)];
      std::string record = fmt::format("{}{{\"name\": \"{}\", \"age\": {}, \"city\": \"{}\"}}",
                                       r ? ", " : "", name, 18 + rng() % 60, city);
      if (static_cast<int32_t>(tok.encode(records + record, false).size()) > f.context - 40) break;
      records += record;
      people.emplace_back(name, city);
    }
    records += "]";
    if (people.empty()) continue;
    const auto& [name, city] = people[rng() % people.size()];
    std::string text = records + "\n\nQuestion: What is the city of " + name + "?\nAnswer:";
    cases.push_back({tok.encode(text, true), city, "json"});
  }
  return cases;
}

bool correct(const std::string& output, const std::string& answer) {
  std::string pred = output.substr(0, output.find('\n'));
  const size_t begin = pred.find_first_not_of(" \t");
  pred = begin == std::string::npos ? "" : pred.substr(begin);
  if (pred.rfind(answer, 0) != 0) return false;
  return pred.size() == answer.size() ||
         !std::isalnum(static_cast<unsigned char>(pred[answer.size()]));
}

// Draft selections for every case at one keep fraction (all jobs batched).
Result<std::vector<SpecPrefillOutcome>> select_all(ModelInstance& draft,
                                                   const std::vector<EvalCase>& cases,
                                                   const EvalFlags& f, double keep,
                                                   std::vector<std::unique_ptr<Request>>& holders) {
  SpecPrefillOptions options;
  options.draft = &draft;
  options.lookahead = f.lookahead;
  options.chunk = f.chunk;
  SpecPrefillStage stage(options, 4096, 0);
  holders.clear();
  std::map<Request*, size_t> index;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto request = std::make_unique<Request>();
    request->options.prompt = cases[i].ids;
    request->stream = std::make_shared<StreamState>();
    stage.add(request.get(), 0, keep);
    index[request.get()] = i;
    holders.push_back(std::move(request));
  }
  std::vector<SpecPrefillOutcome> outcomes(cases.size());
  for (size_t done = 0; done < cases.size();) {
    for (SpecPrefillOutcome& outcome : stage.step()) {
      if (!outcome.applied)
        return errorf("speculative prefill fell back: {}", outcome.stats.fallback_reason);
      outcomes[index[outcome.request]] = std::move(outcome);
      ++done;
    }
  }
  return outcomes;
}

GenerationRequest answer_request(std::vector<int32_t> ids, std::vector<int32_t> positions) {
  GenerationRequest request{std::move(ids), std::move(positions), {}};
  request.params.temperature = 0;
  request.params.max_tokens = 10;
  return request;
}

int run_answer_eval(const EvalFlags& f, ModelInstance& target, ModelInstance& draft,
                    const Tokenizer& tok, const std::vector<EvalCase>& cases) {
  std::vector<std::string> columns = {"full"};
  std::map<std::string, std::vector<bool>> right;  // column -> per case
  Generator generator(target.runner(), target.kv_manager(), GeneratorOptions{2048});
  auto score = [&](const std::string& column, std::vector<GenerationRequest> requests) -> Status {
    SS_ASSIGN_OR_RETURN(std::vector<GenerationResult> results, generator.generate(requests));
    for (size_t i = 0; i < results.size(); ++i) {
      right[column].push_back(correct(tok.decode(results[i].tokens, true), cases[i].answer));
    }
    return {};
  };
  std::vector<GenerationRequest> full;
  for (const auto& c : cases) full.push_back(answer_request(c.ids, {}));
  if (Status s = score("full", std::move(full)); !s.ok()) return report_error(s.message());
  std::vector<std::unique_ptr<Request>> holders;
  std::map<std::string, double> kept_fraction;
  for (double keep : f.keeps) {
    const std::string column = fmt::format("keep {:.2f}", keep);
    columns.push_back(column);
    auto outcomes = select_all(draft, cases, f, keep, holders);
    if (!outcomes.ok()) return report_error(outcomes.message());
    std::vector<GenerationRequest> sparse;
    double kept = 0, total = 0;
    for (auto& o : *outcomes) {
      kept += static_cast<double>(o.stats.kept_tokens);
      total += static_cast<double>(o.stats.prompt_tokens);
      sparse.push_back(answer_request(std::move(o.tokens), std::move(o.positions)));
    }
    kept_fraction[column] = kept / total;
    if (Status s = score(column, std::move(sparse)); !s.ok()) return report_error(s.message());
  }
  // Table: per group, correct counts; regressions = full right, sparse wrong.
  std::printf("| group | n |");
  for (const auto& c : columns) std::printf(" %s |", c.c_str());
  std::printf(" regressions |\n|---|---|");
  for (size_t i = 0; i <= columns.size(); ++i) std::printf("---|");
  std::printf("\n");
  std::vector<std::string> groups;
  for (const auto& c : cases) {
    if (std::find(groups.begin(), groups.end(), c.group) == groups.end()) groups.push_back(c.group);
  }
  int total_regressions = 0;
  for (const auto& group : groups) {
    int n = 0, regressions = 0;
    std::map<std::string, int> count;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].group != group) continue;
      ++n;
      for (const auto& column : columns) count[column] += right[column][i];
      for (size_t k = 1; k < columns.size(); ++k)
        regressions += right["full"][i] && !right[columns[k]][i];
    }
    std::printf("| %s | %d |", group.c_str(), n);
    for (const auto& column : columns) std::printf(" %d/%d |", count[column], n);
    std::printf(" %d |\n", regressions);
    total_regressions += regressions;
  }
  std::printf("\nkept fraction of prompt tokens:");
  for (const auto& [column, fraction] : kept_fraction)
    std::printf(" %s -> %.3f;", column.c_str(), fraction);
  std::printf("\nregressions against full prefill: %d\n", total_regressions);
  return 0;
}

// Mean NLL of `continuation` after prefilling (ids, positions) on the target.
double continuation_nll(ModelInstance& model, const std::vector<int32_t>& ids,
                        const std::vector<int32_t>& positions,
                        const std::vector<int32_t>& continuation, int32_t next_position) {
  KvManager& kv = model.kv_manager();
  KvSequence seq = kv.new_sequence(KvSequenceOptions{0, false});
  std::vector<int32_t> tokens = ids;
  tokens.insert(tokens.end(), continuation.begin(), continuation.end());
  const auto n_prompt = static_cast<int32_t>(ids.size());
  double nll = 0;
  for (int32_t begin = 0; begin < static_cast<int32_t>(tokens.size()); begin += 1024) {
    const int32_t end = std::min<int32_t>(static_cast<int32_t>(tokens.size()), begin + 1024);
    StepPlan plan;
    const int32_t first = kv.append(seq, end - begin);
    for (int32_t i = begin; i < end; ++i) {
      const int32_t position =
          i < n_prompt ? positions[static_cast<size_t>(i)] : next_position + (i - n_prompt);
      // Row i predicts token i + 1: logits from the last prompt token onward.
      plan.add_token(tokens[static_cast<size_t>(i)], position, 0, first + i - begin,
                     i >= n_prompt - 1 && i + 1 < static_cast<int32_t>(tokens.size()));
    }
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    StepOutput out = model.runner().run(plan);
    const int64_t vocab = out.logits.size(1);
    for (int64_t r = 0; r < out.logits.size(0); ++r) {
      const int32_t row_index = plan.logit_rows[static_cast<size_t>(r)] + begin;
      const float* row = out.logits.f32() + r * vocab;
      const float max = *std::max_element(row, row + vocab);
      double total = 0;
      for (int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(row[v] - max));
      nll += std::log(total) + max - row[tokens[static_cast<size_t>(row_index + 1)]];
    }
  }
  kv.free(seq);
  return nll / static_cast<double>(continuation.size());
}

int run_ppl_eval(const EvalFlags& f, ModelInstance& target, ModelInstance& draft,
                 const Tokenizer& tok, const std::string& filler) {
  std::mt19937 rng(f.seed);
  constexpr int32_t kContinuation = 64;
  std::vector<EvalCase> cases;
  std::vector<std::vector<int32_t>> continuations;
  for (int32_t i = 0; i < f.n; ++i) {
    std::vector<int32_t> ids = tok.encode(filler_slice(filler, tok, f.context, rng), true);
    if (static_cast<int32_t>(ids.size()) <= 2 * kContinuation) continue;
    continuations.emplace_back(ids.end() - kContinuation, ids.end());
    ids.resize(ids.size() - kContinuation);
    cases.push_back({std::move(ids), "", "ppl"});
  }
  std::printf("| prefill | mean NLL (nats/token) | perplexity |\n|---|---|---|\n");
  double full = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> positions(cases[i].ids.size());
    std::iota(positions.begin(), positions.end(), 0);
    full += continuation_nll(target, cases[i].ids, positions, continuations[i],
                             static_cast<int32_t>(positions.size()));
  }
  full /= static_cast<double>(cases.size());
  std::printf("| full | %.4f | %.3f |\n", full, std::exp(full));
  std::vector<std::unique_ptr<Request>> holders;
  for (double keep : f.keeps) {
    auto outcomes = select_all(draft, cases, f, keep, holders);
    if (!outcomes.ok()) return report_error(outcomes.message());
    double nll = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const auto& o = (*outcomes)[i];
      nll += continuation_nll(target, o.tokens, o.positions, continuations[i],
                              static_cast<int32_t>(cases[i].ids.size()));
    }
    nll /= static_cast<double>(cases.size());
    std::printf("| keep %.2f | %.4f | %.3f |\n", keep, nll, std::exp(nll));
  }
  return 0;
}

int run_eval(const std::string& task, const EvalFlags& f) {
  if (f.draft_dir.empty()) return report_error("--draft is required");
  const auto draft_quantization = draft_weight_quantization(f.draft_quantization, f.model);
  if (!draft_quantization.ok()) return report_error(draft_quantization.message());
  for (double keep : f.keeps) {
    if (!(keep > 0 && keep <= 1))
      return report_error(fmt::format("--keep must be in (0, 1], got {}", keep));
  }
  auto tokenizer = Tokenizer::load_dir(f.model.model_dir);
  if (!tokenizer.ok()) return report_error(tokenizer.message());
  if (!std::filesystem::exists(f.filler_model + "/config.json")) {
    return report_error("filler model " + f.filler_model + " not found (--filler-model DIR)");
  }
  auto filler =
      make_filler(f.filler_model, f.model.threads, static_cast<size_t>(f.context) * 24, f.seed);
  if (!filler.ok()) return report_error(filler.message());

  CpuBackend backend(CpuBackendOptions{f.model.threads});
  auto target_options =
      f.model.instance_options(static_cast<int64_t>(f.n) * (f.context + 64 + 16) *
                               static_cast<int64_t>(std::max<size_t>(1, f.depths.size())));
  if (!target_options.ok()) return report_error(target_options.message());
  auto target = ModelInstance::create(*target_options, backend);
  if (!target.ok()) return report_error(target.message());
  ModelInstanceOptions draft_options = *target_options;
  draft_options.model_dir = f.draft_dir;
  draft_options.config_path.clear();
  // --quantization is the target's (ModelFlags); the draft has its own.
  draft_options.quantization = *draft_quantization;
  // Every case's draft work runs at once: room for all of them (+ a block each).
  draft_options.kv_tokens = static_cast<int64_t>(f.n) *
                            static_cast<int64_t>(std::max<size_t>(1, f.depths.size())) *
                            (f.context + 64 + f.lookahead + draft_options.block_size);
  auto draft = ModelInstance::create(draft_options, backend);
  if (!draft.ok()) return report_error(draft.message());
  if ((*draft)->config().vocab_size != (*target)->config().vocab_size) {
    return report_error("the draft's vocabulary differs from the target's");
  }
  // The weight formats are part of what a quality result means: name them.
  std::fprintf(stderr,
               "specstack eval %s: target %s (%s), draft %s (%s), context %d, %d cases per group\n",
               task.c_str(), f.model.model_dir.c_str(), weight_format(f.model.quantization),
               f.draft_dir.c_str(), weight_format(f.draft_quantization), f.context, f.n);
  if (task == "ppl") return run_ppl_eval(f, **target, **draft, *tokenizer, *filler);
  if (task == "json")
    return run_answer_eval(f, **target, **draft, *tokenizer, json_cases(f, *tokenizer));
  // needle: evaluate one depth at a time to bound KV memory.
  std::vector<EvalCase> cases = needle_cases(*tokenizer, *filler, f.depths, f.n, f.context, f.seed);
  return run_answer_eval(f, **target, **draft, *tokenizer, cases);
}

}  // namespace

std::function<int()> add_eval_command(CLI::App& app) {
  auto flags = std::make_shared<EvalFlags>();
  auto task = std::make_shared<std::string>();
  CLI::App* eval = app.add_subcommand(
      "eval",
      "quality probes: speculative prefill (needle, json, ppl) and speculative decoding (spec)");
  eval->require_subcommand(1);
  for (const char* name : {"needle", "json", "ppl"}) {
    CLI::App* sub = eval->add_subcommand(name, std::string(name) + " probe");
    flags->model.add_to(*sub);
    sub->add_option("--draft", flags->draft_dir, "draft model folder (same tokenizer)")->required();
    add_draft_quantization_option(*sub, flags->draft_quantization);
    sub->add_option("--filler-model", flags->filler_model, "model that writes the story filler");
    sub->add_option("--keep", flags->keeps, "keep fractions")->delimiter(',');
    sub->add_option("--n", flags->n, "cases per group")->check(CLI::PositiveNumber);
    sub->add_option("--context", flags->context, "prompt length in tokens")
        ->check(CLI::Range(64, 1 << 20));
    sub->add_option("--seed", flags->seed, "seed for prompts and filler");
    sub->add_option("--lookahead", flags->lookahead, "draft lookahead steps")
        ->check(CLI::PositiveNumber);
    sub->add_option("--chunk", flags->chunk, "selection chunk size")->check(CLI::PositiveNumber);
    if (std::string(name) == "needle")
      sub->add_option("--depths", flags->depths, "needle depths")->delimiter(',');
    sub->callback([task, name] { *task = name; });
  }
  std::function<int()> run_spec = add_eval_spec_command(*eval);
  return [flags, task, eval, run_spec] {
    if (eval->got_subcommand("spec")) return run_spec();
    return run_eval(*task, *flags);
  };
}

}  // namespace specstack::cli

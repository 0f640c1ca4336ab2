// specstack generate: stream a completion for one prompt to the terminal and
// report prompt / generation throughput. With --draft it runs through the
// serving Engine (target + draft: speculative prefill, and speculative
// decoding with --spec-decode) instead of the offline Generator, and also
// reports what the draft did.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant_kernels.h"
#include "chat/chat_template.h"
#include "cli/commands.h"
#include "cli/draft_model_flags.h"
#include "cli/progress_bar.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/sampler.h"
#include "server/chat_prompt.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {
namespace {

struct GenerateFlags {
  ModelFlags model;
  std::string prompt;
  std::string tokens;
  int32_t prompt_length = 0;
  bool chat = false;
  SamplingParams sampling;
  std::vector<std::string> stop;
  uint64_t seed = 0;
  bool has_seed = false;
  int32_t max_batched_tokens = 512;
  DraftModelFlags draft;
  bool specprefill = false;  // force it on for this prompt, whatever its length
  SpecPrefillOptions specprefill_settings;
  SpecDecodeFlags specdecode;
};

struct RunResult {
  GenerationStats stats;
  FinishReason finish_reason = FinishReason::kFinishLength;
  // The Engine path (--draft): what the draft did, reported after the text.
  std::optional<RequestStats> engine_stats;
  int64_t verifications = 0;  // speculative decoding verify steps
};

Result<std::vector<int32_t>> build_prompt(const GenerateFlags& flags, const Tokenizer* tokenizer,
                                          int64_t vocab) {
  const int sources = !flags.prompt.empty() + !flags.tokens.empty() + (flags.prompt_length > 0);
  if (sources != 1) return make_error("give exactly one of --prompt, --tokens, --prompt-length");
  if (!flags.tokens.empty()) {
    SS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_int_list(flags.tokens, "--tokens"));
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) return errorf("--tokens: id {} out of range [0, {})", id, vocab);
    }
    return ids;
  }
  if (flags.prompt_length > 0) {  // seeded random ids: for dummy-weight runs
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> pick(3, static_cast<int32_t>(vocab - 1));
    std::vector<int32_t> ids(static_cast<size_t>(flags.prompt_length));
    for (auto& id : ids) id = pick(rng);
    return ids;
  }
  if (tokenizer == nullptr)
    return make_error(
        "--prompt needs a tokenizer (tokenizer.json in the model folder, or a GGUF file's)");
  if (!flags.chat) return tokenizer->encode(flags.prompt, /*add_special_tokens=*/true);
  if (tokenizer->chat_template().empty()) {
    return make_error(
        "--chat: the model has no chat template (tokenizer_config.json chat_template, or a GGUF "
        "file's tokenizer.chat_template)");
  }
  SS_ASSIGN_OR_RETURN(ChatTemplate chat_template, ChatTemplate::parse(tokenizer->chat_template()));
  // Exactly the server's default chat tokenization (server/chat_prompt.h):
  // the prompt is a user message, so its text is plain text inside the
  // template's markup and can never produce special tokens.
  ServedModel model;
  model.tokenizer = tokenizer;
  model.chat_template = &chat_template;
  OrderedJson body = OrderedJson::object();
  body["messages"] = OrderedJson::array({{{"role", "user"}, {"content", flags.prompt}}});
  auto ids = chat_prompt_ids(body, model);
  if (!ids.ok()) return errorf("--chat: {}", ids.message());
  return ids;
}

Result<RunResult> run_generator(ModelInstance& model, const GenerateFlags& flags,
                                GenerationRequest request, const TokenCallback& on_token) {
  GeneratorOptions generator_options;
  generator_options.max_batched_tokens = flags.max_batched_tokens;
  Generator generator(model.runner(), model.kv_manager(), generator_options);
  RunResult run;
  SS_ASSIGN_OR_RETURN(std::vector<GenerationResult> results,
                      generator.generate({std::move(request)}, on_token, &run.stats));
  run.finish_reason = results[0].finish_reason;
  return run;
}

void print_specprefill_stats(const SpecPrefillStats& sp, const GenerateFlags& flags) {
  if (!sp.applied && sp.fallback_reason.empty()) {
    // A --spec-decode run asked for decoding only; "not applied" would be noise.
    if (flags.specdecode.enabled) return;
    std::fprintf(stderr,
                 "specstack: specprefill: not applied (prompt below --specprefill-threshold %lld; "
                 "--specprefill forces it)\n",
                 static_cast<long long>(flags.specprefill_settings.threshold));
    return;
  }
  const double kept_pct = sp.prompt_tokens > 0 ? 100.0 * static_cast<double>(sp.kept_tokens) /
                                                     static_cast<double>(sp.prompt_tokens)
                                               : 0.0;
  std::fprintf(stderr,
               "specstack: specprefill: applied %s, kept %lld of %lld prompt tokens (%.1f%%), "
               "scoring %.1f ms%s%s\n",
               sp.applied ? "yes" : "no", static_cast<long long>(sp.kept_tokens),
               static_cast<long long>(sp.prompt_tokens), kept_pct, sp.scoring_ms,
               sp.fallback_reason.empty() ? "" : ", fallback: ", sp.fallback_reason.c_str());
}

// `verifications` comes from the engine's metrics: the engine served only
// this request, and RequestStats counts tokens, not verify steps.
void print_specdecode_stats(const SpecDecodeStats& sd, int64_t verifications) {
  const double mean_accepted = verifications > 0 ? static_cast<double>(sd.accepted_tokens) /
                                                       static_cast<double>(verifications)
                                                 : 0.0;
  std::fprintf(stderr,
               "specstack: speculative decoding: drafted %lld, accepted %lld (acceptance %.2f), "
               "mean accepted length %.2f per verification\n",
               static_cast<long long>(sd.draft_tokens), static_cast<long long>(sd.accepted_tokens),
               sd.acceptance_rate(), mean_accepted);
}

// The engine publishes its metrics after the step that finished the request,
// which may be just after the stream saw the finish: wait for them briefly.
EngineMetrics settled_metrics(const Engine& engine) {
  EngineMetrics metrics = engine.metrics();
  for (int i = 0; i < 1000; ++i) {
    if (metrics.requests_finished_total + metrics.requests_aborted_total > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    metrics = engine.metrics();
  }
  return metrics;
}

// One request through an in-process Engine with the draft. The prefill time
// is submit -> first token, so it includes the draft's scoring.
Result<RunResult> run_engine(ModelInstance& target, ModelInstance& draft,
                             const GenerateFlags& flags, GenerationRequest request,
                             const TokenCallback& on_token) {
  using SteadyClock = std::chrono::steady_clock;
  EngineOptions options;
  options.max_num_batched_tokens = flags.max_batched_tokens;
  options.max_num_seqs = 1;
  options.max_queue = 1;
  options.specprefill = flags.specprefill_settings;
  options.specprefill.draft = &draft;
  options.specdecode = flags.specdecode.engine_options(&draft);
  Engine engine(target, options);
  RequestOptions submit{std::move(request.prompt), request.params, 1, -1, {}, {}};
  if (flags.specprefill) submit.specprefill.enabled = true;
  if (flags.specdecode.enabled) submit.specdecode.enabled = true;
  RunResult run;
  run.stats.prompt_tokens = static_cast<int64_t>(submit.prompt.size());
  auto seconds_since = [](SteadyClock::time_point t) {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  };
  const auto start = SteadyClock::now();
  SS_ASSIGN_OR_RETURN(std::shared_ptr<RequestStream> stream, engine.submit(std::move(submit)));
  SteadyClock::time_point first_token;
  bool stopped = false;
  while (!stream->done()) {
    auto event = stream->next(std::chrono::milliseconds(1000));
    if (!event) continue;
    for (int32_t token : event->tokens) {
      if (stopped) break;
      if (run.stats.generated_tokens++ == 0) {
        run.stats.prefill_seconds = seconds_since(start);
        first_token = SteadyClock::now();
      }
      if (!on_token(0, token)) {  // a stop string matched: the rest is not wanted
        stopped = true;
        stream->cancel();
      }
    }
    if (event->finish && !stopped) run.finish_reason = *event->finish;
  }
  if (run.stats.generated_tokens > 0) run.stats.decode_seconds = seconds_since(first_token);
  if (stopped) run.finish_reason = FinishReason::kFinishStop;
  run.engine_stats = stream->stats();
  if (flags.specdecode.enabled) run.verifications = settled_metrics(engine).specdecode_verify_total;
  return run;
}

int run_generate(GenerateFlags& flags) {
  const auto load_start = std::chrono::steady_clock::now();
  std::optional<Tokenizer> tokenizer;
  if (!flags.model.model_dir.empty() && Tokenizer::available(flags.model.model_dir)) {
    auto loaded = Tokenizer::load_dir(flags.model.model_dir);
    if (!loaded.ok()) return report_error(loaded.message());
    tokenizer.emplace(std::move(loaded).value());
  }
  if (flags.has_seed) flags.sampling.seed = flags.seed;
  flags.sampling.stop_strings = flags.stop;
  if (Status status = flags.sampling.validate(); !status.ok())
    return report_error(status.message());
  if (flags.specprefill && !flags.draft.has_draft()) {
    return report_error(
        "--specprefill needs a draft model: give --draft DIR (a small model with the "
        "target's tokenizer)");
  }
  if (flags.draft.has_draft()) {
    if (Status status = flags.draft.validate(flags.model); !status.ok())
      return report_error(status.message());
    if (Status status = validate_specprefill_settings(flags.specprefill_settings); !status.ok()) {
      return report_error(status.message());
    }
  }
  if (Status status = flags.specdecode.validate(flags.draft.has_draft()); !status.ok())
    return report_error(status.message());

  // The config is read first to size the KV cache and check the context length.
  auto options = flags.model.instance_options(0);
  if (!options.ok()) return report_error(options.message());
  auto config =
      load_model_config(options->config_path.empty() ? options->model_dir : options->config_path);
  if (!config.ok()) return report_error(config.message());
  auto prompt = build_prompt(flags, tokenizer ? &*tokenizer : nullptr, config->vocab_size);
  if (!prompt.ok()) return report_error(prompt.message());
  const int64_t total = static_cast<int64_t>(prompt->size()) + flags.sampling.max_tokens;
  if (config->max_position_embeddings > 0 && total > config->max_position_embeddings) {
    return report_error(
        fmt::format("prompt ({} tokens) + -n {} exceeds the model context of {} tokens",
                    prompt->size(), flags.sampling.max_tokens, config->max_position_embeddings));
  }
  options->kv_tokens = total + options->block_size;
  if (flags.draft.has_draft()) {  // before any weights load, so a mismatched draft fails fast
    if (auto draft_config = load_draft_config(flags.draft, *config); !draft_config.ok()) {
      return report_error(draft_config.message());
    }
  }

  CpuBackend backend(CpuBackendOptions{flags.model.threads});
  auto instance = create_model_with_progress(*options, backend, "specstack: loading weights");
  if (!instance.ok()) return report_error(instance.message());
  ModelInstance& model = **instance;
  const double load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::fprintf(
      stderr,
      "specstack: %s, %lld layers, hidden %lld, weights %.1f MiB, KV cache %.1f MiB, "
      "loaded in %.2f s\n",
      architecture_name(model.config().arch), static_cast<long long>(model.config().n_layers),
      static_cast<long long>(model.config().hidden_size), model.model().weight_bytes() / 1048576.0,
      model.kv().nbytes() / 1048576.0, load_seconds);
  if (flags.model.cpu_quantized()) {
    std::fprintf(stderr, "specstack: CPU %s\n", cpu::describe_quant_kernels().c_str());
  }

  std::unique_ptr<StreamDecoder> decoder;
  if (tokenizer)
    decoder = std::make_unique<StreamDecoder>(*tokenizer, /*skip_special_tokens=*/true);
  StopStringMatcher stops(flags.stop);
  auto emit = [&](const std::string& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  };
  TokenCallback on_token = [&](size_t, int32_t token) {
    if (!decoder) {
      emit(std::to_string(token) + " ");
      return true;
    }
    emit(stops.push(decoder->push(token)));
    return !stops.stopped();
  };

  GenerationRequest request;
  request.prompt = std::move(prompt).value();
  request.params = flags.sampling;
  Result<RunResult> run = make_error("no generation ran");
  if (flags.draft.has_draft()) {
    // The draft holds the prompt plus its lookahead tokens and, when it
    // speculates, every generated token plus its K proposals.
    int64_t draft_kv_tokens = static_cast<int64_t>(request.prompt.size()) +
                              flags.specprefill_settings.lookahead + 2 * flags.model.block_size;
    if (flags.specdecode.enabled) {
      draft_kv_tokens += request.params.max_tokens + flags.specdecode.max_draft_tokens;
    }
    auto draft = load_draft_model(flags.draft, flags.model, draft_kv_tokens,
                                  flags.max_batched_tokens, backend);
    if (!draft.ok()) return report_error(draft.message());
    const ModelConfig& draft_config = (*draft)->config();
    std::fprintf(stderr, "specstack: draft %s, %lld layers, hidden %lld, weights %.1f MiB\n",
                 architecture_name(draft_config.arch),
                 static_cast<long long>(draft_config.n_layers),
                 static_cast<long long>(draft_config.hidden_size),
                 (*draft)->model().weight_bytes() / 1048576.0);
    run = run_engine(model, **draft, flags, std::move(request), on_token);
  } else {
    run = run_generator(model, flags, std::move(request), on_token);
  }
  if (!run.ok()) return report_error(run.message());
  const GenerationStats& stats = run->stats;
  if (decoder && !stops.stopped()) emit(stops.push(decoder->flush()) + stops.flush());
  emit("\n");
  if (run->engine_stats) {
    print_specprefill_stats(run->engine_stats->specprefill, flags);
    if (flags.specdecode.enabled) {
      print_specdecode_stats(run->engine_stats->speculative, run->verifications);
    }
  }
  const double prefill_rate =
      stats.prefill_seconds > 0 ? stats.prompt_tokens / stats.prefill_seconds : 0;
  const int64_t decoded = std::max<int64_t>(0, stats.generated_tokens - 1);
  const double decode_rate = stats.decode_seconds > 0 ? decoded / stats.decode_seconds : 0;
  std::fprintf(stderr,
               "specstack: prompt %lld tokens in %.3f s (%.1f tok/s); generation %lld tokens, "
               "%lld decode steps in %.3f s (%.1f tok/s); finish: %s\n",
               static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds, prefill_rate,
               static_cast<long long>(stats.generated_tokens), static_cast<long long>(decoded),
               stats.decode_seconds, decode_rate,
               run->finish_reason == FinishReason::kFinishStop ? "stop" : "length");
  return 0;
}

}  // namespace

std::function<int()> add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<GenerateFlags>();
  flags->sampling.temperature = 0.0f;
  flags->sampling.max_tokens = 64;
  CLI::App* command = app.add_subcommand("generate", "generate a completion for one prompt");
  flags->model.add_to(*command);
  command->add_option("-p,--prompt", flags->prompt, "prompt text");
  command->add_option("--tokens", flags->tokens, "prompt as token ids, e.g. 1,2,3");
  command->add_option("--prompt-length", flags->prompt_length,
                      "random prompt of N token ids (seeded)");
  command->add_flag("--chat", flags->chat,
                    "wrap --prompt as a user message with the chat template");
  command->add_option("-n,--max-tokens", flags->sampling.max_tokens, "tokens to generate")
      ->check(CLI::PositiveNumber);
  command->add_option("--temperature", flags->sampling.temperature, "0 = greedy (default)");
  command->add_option("--top-k", flags->sampling.top_k, "top-k (0 = off)");
  command->add_option("--top-p", flags->sampling.top_p, "nucleus sampling mass");
  command->add_option("--min-p", flags->sampling.min_p, "min-p relative to the top token");
  command->add_option("--repetition-penalty", flags->sampling.repetition_penalty,
                      "HF-style repetition penalty");
  command->add_option("--presence-penalty", flags->sampling.presence_penalty,
                      "OpenAI presence penalty");
  command->add_option("--frequency-penalty", flags->sampling.frequency_penalty,
                      "OpenAI frequency penalty");
  command->add_option("--seed", flags->seed, "sampling seed")->each([flags](const std::string&) {
    flags->has_seed = true;
  });
  command->add_option("--stop", flags->stop, "stop string (repeatable)");
  command->add_flag("--ignore-eos", flags->sampling.ignore_eos, "keep generating past EOS");
  command->add_option("--max-batched-tokens", flags->max_batched_tokens, "prefill chunk size")
      ->check(CLI::PositiveNumber);
  flags->draft.add_to(*command);
  command->add_flag(
      "--specprefill", flags->specprefill,
      "speculative prefill for this prompt whatever its length (needs --draft; "
      "without it, the draft is used for prompts of >= --specprefill-threshold tokens)");
  command->add_option("--specprefill-keep-pct", flags->specprefill_settings.keep_pct,
                      "fraction of prompt tokens the target prefills, in (0, 1] (default 0.2)");
  command->add_option("--specprefill-threshold", flags->specprefill_settings.threshold,
                      "apply it to prompts of at least this many tokens (default 8192)");
  add_specprefill_tuning(*command, flags->specprefill_settings);
  flags->specdecode.add_to(*command, "this prompt speculates");
  return [flags] { return run_generate(*flags); };
}

}  // namespace specstack::cli

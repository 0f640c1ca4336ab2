// specstack serve: load a model, start the serving engine and the
// OpenAI-compatible HTTP server, and run until SIGINT / SIGTERM.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant_kernels.h"
#include "cli/commands.h"
#include "cli/progress_bar.h"
#include "cli/serve_draft.h"
#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"  // kMaxTimeoutSeconds
#include "server/process_memory.h"
#include "server/shutdown_signals.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ServeFlags {
  ModelFlags model;
  DraftFlags draft;
  std::string tokenizer_dir;  // default: --model
  HttpServerOptions http;
  EngineOptions engine;
  bool no_prefix_caching = false;
  int64_t kv_blocks = 0;
  double kv_memory_gb = 2.0;
  bool no_access_log = false;
  bool no_web_ui = false;
  bool chat_content_special_tokens = false;
  int http_threads = 0;  // 0: enough for every running and waiting request
  int stats_interval_s = 10;
  // After SIGTERM / SIGINT, how long requests in flight may run on before
  // they are cancelled; 0: at once.
  double shutdown_timeout_s = 30;
};

// "models/tinystories-656k/" -> "tinystories-656k"
std::string default_model_name(const ServeFlags& flags) {
  std::filesystem::path path(flags.model.model_dir.empty() ? flags.model.config_path
                                                           : flags.model.model_dir);
  if (!path.has_filename()) path = path.parent_path();
  // A folder's name, or a file's without its extension (model.gguf -> model).
  const bool file = flags.model.model_dir.empty() || path.extension() == ".gguf";
  return file ? path.stem().string() : path.filename().string();
}

// Every open connection is a file descriptor: lift the soft limit to the
// hard one, as servers do, and keep --max-connections below what it leaves.
size_t fit_max_connections(size_t wanted) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return wanted;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  const rlim_t reserve = 256;  // the listener, epoll, model files, logs
  if (limit.rlim_cur == RLIM_INFINITY || wanted + reserve <= limit.rlim_cur) return wanted;
  const size_t fitted =
      limit.rlim_cur > 2 * reserve ? limit.rlim_cur - reserve : limit.rlim_cur / 2;
  std::fprintf(stderr,
               "specstack: warning: --max-connections %zu lowered to %zu: the open-file limit "
               "is %llu\n",
               wanted, fitted, static_cast<unsigned long long>(limit.rlim_cur));
  return fitted;
}

struct KvPlan {
  int64_t blocks = 0;
  int64_t max_context = 0;
  int64_t max_blocks = 0;  // GPU: cap for the memory-sized pool
};

// The KV pool: --kv-blocks, else --kv-memory-gb, never more than every
// sequence at full context could use. A context longer than the pool could
// never be served (the engine rejects such requests), so it is lowered.
Result<KvPlan> plan_kv(const ServeFlags& flags, const ModelConfig& config) {
  KvCacheShape shape;
  shape.n_layers = config.n_layers;
  shape.n_blocks = 1;
  shape.block_size = flags.model.block_size;
  shape.n_kv_heads = config.n_kv_heads;
  shape.head_dim = config.head_dim;
  shape.dtype = flags.model.host_kv_dtype();
  const auto block_bytes = static_cast<double>(KvCache::bytes_per_block(shape));
  KvPlan plan;
  plan.max_context =
      flags.engine.max_model_len > 0 ? flags.engine.max_model_len : config.max_position_embeddings;
  if (plan.max_context <= 0) plan.max_context = 4096;
  const int64_t block_size = flags.model.block_size;
  const int64_t blocks_per_context = (plan.max_context + block_size - 1) / block_size;
  if (flags.kv_blocks > 0) {
    plan.blocks = flags.kv_blocks;
  } else if (flags.model.device == "cuda") {
    // The GPU pool takes --gpu-memory-fraction of device memory once the
    // weights are in (sized by the backend), at most every sequence at full
    // context; the context is checked after.
    plan.blocks = 0;
    plan.max_blocks = blocks_per_context * flags.engine.max_num_seqs;
    return plan;
  } else {
    if (!(flags.kv_memory_gb > 0))
      return errorf("--kv-memory-gb must be > 0, got {}", flags.kv_memory_gb);
    plan.blocks = static_cast<int64_t>(flags.kv_memory_gb * 1073741824.0 / block_bytes);
    plan.blocks = std::min(plan.blocks, blocks_per_context * flags.engine.max_num_seqs);
  }
  if (plan.blocks < 1) {
    return errorf(
        "the KV cache holds no block of {} tokens ({:.1f} KiB each); raise --kv-memory-gb",
        block_size, block_bytes / 1024);
  }
  if (plan.blocks * block_size < plan.max_context) {
    std::fprintf(stderr,
                 "specstack: warning: the KV cache holds %lld tokens, less than the context of "
                 "%lld; serving a context of %lld tokens (raise --kv-memory-gb or --kv-blocks)\n",
                 static_cast<long long>(plan.blocks * block_size),
                 static_cast<long long>(plan.max_context),
                 static_cast<long long>(plan.blocks * block_size));
    plan.max_context = plan.blocks * block_size;
  }
  return plan;
}

void log_stats(const EngineMetrics& m, const ThroughputRates& rates) {
  const double kv_used = m.kv_blocks_total > 0
                             ? 100.0 * static_cast<double>(m.kv_blocks_total - m.kv_blocks_free) /
                                   static_cast<double>(m.kv_blocks_total)
                             : 0.0;
  const double hit = m.prefix_cache_queried_tokens > 0
                         ? 100.0 * static_cast<double>(m.prefix_cache_hit_tokens) /
                               static_cast<double>(m.prefix_cache_queried_tokens)
                         : 0.0;
  std::fprintf(stderr,
               "specstack: prompt %.1f tok/s, generation %.1f tok/s, running %lld, waiting %lld, "
               "KV cache %.1f%% used, prefix cache hits %.1f%%\n",
               rates.prompt_tokens_per_s, rates.generation_tokens_per_s,
               static_cast<long long>(m.n_running), static_cast<long long>(m.n_waiting), kv_used,
               hit);
}

// The shutdown's end: waits (up to 2 s) for the engine to retire what the
// drain cancelled, then logs whether every KV block is back in the pool.
void log_final_state(const Engine& engine) {
  EngineMetrics m = engine.metrics();
  auto settled = [](const EngineMetrics& e) {
    return e.n_running == 0 && e.n_waiting == 0 && e.kv_blocks_free == e.kv_blocks_total;
  };
  for (int i = 0; i < 200 && !settled(m); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = engine.metrics();
  }
  std::fprintf(stderr,
               "specstack: stopped: %lld requests finished, %lld choices aborted; KV cache %lld of "
               "%lld blocks free%s\n",
               static_cast<long long>(m.requests_finished_total),
               static_cast<long long>(m.requests_aborted_total),
               static_cast<long long>(m.kv_blocks_free), static_cast<long long>(m.kv_blocks_total),
               settled(m) ? "" : " (warning: requests are still in the engine)");
}

// Loads the draft of `plan` on `backend`, with a progress bar on a terminal.
Result<std::unique_ptr<ModelInstance>> load_draft(const DraftPlan& plan, Backend& backend) {
  std::fprintf(stderr, "specstack: loading draft %s ...\n",
               plan.options.dummy_weights ? "dummy weights" : plan.options.model_dir.c_str());
  auto instance =
      create_model_with_progress(plan.options, backend, "specstack: loading draft weights");
  if (!instance.ok()) return errorf("draft: {}", instance.message());
  return instance;
}

// "ready in 0.41 s: weights 0.10 s, KV reserve 0.00 s, ...": the time to
// listen and where it went, so a slow start names its cause.
std::string describe_startup(double total_s, double tokenizer_s, const StartupTimes& target,
                             double draft_s, bool on_gpu) {
  std::string out = fmt::format("ready in {:.2f} s: weights {:.2f} s, KV reserve {:.2f} s", total_s,
                                target.weights_s, target.kv_reserve_s);
  if (on_gpu) out += fmt::format(", CUDA graphs {:.2f} s", target.graph_capture_s);
  out += fmt::format(", tokenizer {:.2f} s", tokenizer_s);
  if (draft_s > 0) out += fmt::format(", draft {:.2f} s", draft_s);
  const double known =
      target.weights_s + target.kv_reserve_s + target.graph_capture_s + tokenizer_s + draft_s;
  return out + fmt::format(", other {:.2f} s", std::max(0.0, total_s - known));
}

int run_serve(ServeFlags& flags) {
  const auto serve_start = Clock::now();
  ShutdownSignals signals;  // from now on SIGINT / SIGTERM stop the server cleanly

  if (Status valid = validate_draft_flags(flags.draft, flags.model, flags.engine.specprefill);
      !valid.ok()) {
    return report_error(valid.message());
  }
  auto options = flags.model.instance_options(0);
  if (!options.ok()) return report_error(options.message());
  auto config =
      load_model_config(options->config_path.empty() ? options->model_dir : options->config_path);
  if (!config.ok()) return report_error(config.message());
  const std::string tokenizer_dir =
      flags.tokenizer_dir.empty() ? flags.model.model_dir : flags.tokenizer_dir;
  if (tokenizer_dir.empty())
    return report_error("serve needs a tokenizer: give --model or --tokenizer DIR");
  const auto tokenizer_start = Clock::now();
  auto tokenizer = Tokenizer::load_dir(tokenizer_dir);
  if (!tokenizer.ok()) return report_error(tokenizer.message());
  const double tokenizer_seconds =
      std::chrono::duration<double>(Clock::now() - tokenizer_start).count();
  auto kv = plan_kv(flags, *config);
  if (!kv.ok()) return report_error(kv.message());
  options->kv_blocks = kv->blocks;
  options->max_kv_blocks = kv->max_blocks;
  // GPU activations sized for the step budget up front: growing them at the
  // first larger step would drop the decode graphs for good.
  options->max_tokens_per_step =
      std::max<int64_t>(options->max_tokens_per_step, flags.engine.max_num_batched_tokens);
  // The draft is checked before any weights load, so a mismatched one fails fast.
  std::optional<DraftPlan> draft_plan;
  if (flags.draft.has_draft()) {
    auto planned = plan_draft(flags.draft, flags.model, *config, *tokenizer);
    if (!planned.ok()) return report_error(planned.message());
    draft_plan = std::move(planned).value();
    draft_plan->options.max_tokens_per_step = options->max_tokens_per_step;  // its catch-up chunks
    // kv->blocks is 0 for a GPU target until it loads; see size_draft_kv.
    if (Status sized = size_draft_kv(flags.draft, flags.model, kv->blocks, kv->max_context,
                                     flags.engine.max_num_seqs, *draft_plan);
        !sized.ok()) {
      return report_error(sized.message());
    }
  }

  const auto load_start = Clock::now();
  std::fprintf(stderr, "specstack: loading %s ...\n",
               flags.model.dummy_weights ? "dummy weights" : flags.model.model_dir.c_str());
  CpuBackend backend(CpuBackendOptions{flags.model.threads});
  auto instance = create_model_with_progress(*options, backend, "specstack: loading weights");
  if (!instance.ok()) return report_error(instance.message());
  ModelInstance& model = **instance;
  if (kv->blocks == 0) {  // sized from GPU memory: now known
    kv->blocks = model.pool().n_blocks();
    kv->max_context = std::min(kv->max_context, kv->blocks * flags.model.block_size);
  }
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();

  // Declared before the engine, so it outlives the engine that uses it.
  std::unique_ptr<ModelInstance> draft;
  double draft_load_seconds = 0;
  if (draft_plan && draft_plan->kv_blocks == 0) {  // waited for the GPU target's pool
    if (Status sized = size_draft_kv(flags.draft, flags.model, kv->blocks, kv->max_context,
                                     flags.engine.max_num_seqs, *draft_plan);
        !sized.ok()) {
      return report_error(sized.message());
    }
  }
  if (draft_plan) {
    const auto draft_start = Clock::now();
    auto loaded = load_draft(*draft_plan, backend);
    if (!loaded.ok() && flags.model.device == "cuda" && flags.draft.specdecode.enabled) {
      // The target's pool took its share of the GPU first.
      return report_error(
          fmt::format("{} (the draft's KV cache holds {} blocks; leave it room with a lower "
                      "--gpu-memory-fraction, or give --draft-kv-blocks)",
                      loaded.message(), draft_plan->kv_blocks));
    }
    if (!loaded.ok()) return report_error(loaded.message());
    draft = std::move(loaded).value();
    draft_load_seconds = std::chrono::duration<double>(Clock::now() - draft_start).count();
    flags.engine.specprefill.draft = draft.get();
    flags.engine.specdecode = flags.draft.specdecode.engine_options(draft.get());
  }
  const SpecPrefillOptions specprefill_settings = flags.engine.specprefill;
  if (draft && !flags.draft.specprefill) {
    // Without --specprefill no prompt is long enough on its own; requests
    // that ask ("specprefill": true) still force it on.
    flags.engine.specprefill.threshold = std::numeric_limits<int64_t>::max();
  }

  flags.engine.enable_prefix_caching = !flags.no_prefix_caching;
  flags.engine.max_model_len = kv->max_context;
  Engine engine(model, flags.engine);

  flags.http.served_model_name = flags.http.served_model_name.empty()
                                     ? default_model_name(flags)
                                     : flags.http.served_model_name;
  flags.http.vocab_size = model.config().vocab_size;
  if (draft) {
    // Prompt ids must be valid for both models' embeddings.
    flags.http.vocab_size = std::min(flags.http.vocab_size, draft->config().vocab_size);
    flags.http.specprefill_usage = true;
    flags.http.specdecode_usage = flags.draft.specdecode.enabled;
  }
  flags.http.access_log = !flags.no_access_log;
  flags.http.web_ui = !flags.no_web_ui;
  flags.http.chat_content = flags.chat_content_special_tokens ? ChatContentTokens::kSpecial
                                                              : ChatContentTokens::kPlainText;
  // A request holds its HTTP thread until it ends, and requests beyond the
  // thread count wait unread; so there must be a thread for every running
  // and waiting request, or the engine's queue limit (429) is never reached.
  // Idle connections hold no thread (server/staged_server.h).
  flags.http.n_threads =
      flags.http_threads > 0
          ? flags.http_threads
          : std::min(2048, flags.engine.max_num_seqs + flags.engine.max_queue + 16);
  flags.http.max_connections = fit_max_connections(flags.http.max_connections);
  HttpServer server(engine, *tokenizer, flags.http);

  const ModelConfig& mc = model.config();
  std::fprintf(stderr,
               "specstack: model '%s': %s, %lld layers, hidden %lld, vocab %lld, weights %.1f MiB "
               "(loaded in %.2f s)\n",
               flags.http.served_model_name.c_str(), architecture_name(mc.arch),
               static_cast<long long>(mc.n_layers), static_cast<long long>(mc.hidden_size),
               static_cast<long long>(mc.vocab_size), model.model().weight_bytes() / 1048576.0,
               load_seconds);
  if (flags.model.cpu_quantized()) {
    std::fprintf(stderr, "specstack: CPU %s\n", cpu::describe_quant_kernels().c_str());
  }
  std::fprintf(
      stderr,
      "specstack: KV cache: %lld blocks x %lld tokens = %lld tokens, %.1f MiB; max context "
      "%lld tokens; prefix caching %s\n",
      static_cast<long long>(kv->blocks), static_cast<long long>(flags.model.block_size),
      static_cast<long long>(kv->blocks * flags.model.block_size), model.kv().nbytes() / 1048576.0,
      static_cast<long long>(engine.max_context()), flags.no_prefix_caching ? "off" : "on");
  if (draft) {
    std::fprintf(
        stderr, "%s\n",
        describe_draft(flags.draft, flags.model, *draft, specprefill_settings, draft_load_seconds)
            .c_str());
    if (flags.draft.specdecode.enabled) {
      std::fprintf(stderr,
                   "specstack: speculative decoding on: %s; requests opt out with "
                   "\"speculative_decoding\": false\n",
                   flags.draft.specdecode.describe().c_str());
    }
  }
  if (!server.chat_template_error().empty()) {
    std::fprintf(stderr, "specstack: warning: /v1/chat/completions is unavailable: %s\n",
                 server.chat_template_error().c_str());
  }
  auto port = server.bind();
  if (!port.ok()) return report_error(port.message());
  const double ready_seconds = std::chrono::duration<double>(Clock::now() - serve_start).count();
  std::fprintf(stderr, "specstack: listening on http://%s:%d (%s)\n", flags.http.host.c_str(),
               *port,
               describe_startup(ready_seconds, tokenizer_seconds, model.startup_times(),
                                draft_load_seconds, model.device() == Device::kCuda)
                   .c_str());

  // Graceful drain. The callbacks run on the watcher thread only, so this
  // state needs no lock. First signal: stop admitting (503), let requests
  // in flight finish; at --shutdown-timeout, or a second signal, end them
  // ("shutdown"); once none is left, stop. A third signal exits at once.
  int n_signals = 0;
  Clock::time_point drain_start;
  bool cancelling = false;
  const auto shutdown_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(flags.shutdown_timeout_s));
  auto cancel_in_flight = [&](const char* why) {
    // Repeated every tick: a request admitted just before the drain began
    // may reach the engine after the first call.
    const int64_t n = server.shutdown_in_flight();
    if (!cancelling) {
      std::fprintf(stderr, "specstack: %s: cancelling %lld requests in flight\n", why,
                   static_cast<long long>(n));
    }
    cancelling = true;
  };
  ThroughputMeter meter;
  auto last_stats = Clock::now();
  auto last_trim = Clock::now();
  signals.watch(
      [&](int signo) {
        ++n_signals;
        const char* name = signo == SIGINT ? "SIGINT" : "SIGTERM";
        if (n_signals == 1) {
          drain_start = Clock::now();
          server.begin_drain();
          std::fprintf(stderr,
                       "specstack: %s received: draining %lld requests in flight (up to %g s; "
                       "a second signal cancels them now)\n",
                       name, static_cast<long long>(server.in_flight()), flags.shutdown_timeout_s);
        } else if (n_signals == 2) {
          cancel_in_flight(fmt::format("second signal ({})", name).c_str());
        } else {
          std::fprintf(stderr, "specstack: third signal, exiting now\n");
          std::_Exit(130);
        }
      },
      [&] {
        if (server.draining()) {
          if (cancelling || Clock::now() - drain_start >= shutdown_timeout) {
            cancel_in_flight("shutdown timeout");
          }
          // Repeated: a stop that races with the listener's start is retried.
          if (server.in_flight() == 0) server.stop();
        }
        const EngineMetrics m = engine.metrics();
        const auto now = Clock::now();
        const ThroughputRates rates =
            meter.observe(now, m.prompt_tokens_total, m.generation_tokens_total);
        // Freed memory of finished requests stays in malloc's arenas
        // otherwise, and RSS creeps up (docs/DESIGN-NOTES.md, "Memory over time").
        if (now - last_trim >= std::chrono::seconds(10)) {
          last_trim = now;
          release_free_heap();
        }
        if (flags.stats_interval_s > 0 &&
            now - last_stats >= std::chrono::seconds(flags.stats_interval_s)) {
          last_stats = now;
          if (m.n_running > 0 || m.n_waiting > 0 || rates.generation_tokens_per_s > 0)
            log_stats(m, rates);
        }
      });
  Status served = server.serve();
  signals.stop();  // the callbacks use the server and the engine
  if (!served.ok()) return report_error(served.message());
  log_final_state(engine);
  return 0;
}

}  // namespace

std::function<int()> add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* command = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  flags->model.add_to(*command);
  flags->draft.add_to(*command, flags->engine.specprefill);
  command->add_option("--tokenizer", flags->tokenizer_dir,
                      "folder with tokenizer.json (default: --model)");
  command->add_option("--host", flags->http.host,
                      "address to bind (default 127.0.0.1: this machine only)");
  command->add_option("--port", flags->http.port, "port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535));
  command->add_option(
      "--api-key", flags->http.api_key,
      "require 'Authorization: Bearer KEY' on /v1/* (/health and /metrics stay open)");
  command->add_option("--served-model-name", flags->http.served_model_name,
                      "model name clients must use (default: the model folder's name)");
  command
      ->add_option("--max-num-seqs", flags->engine.max_num_seqs, "most sequences running at once")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--max-num-batched-tokens", flags->engine.max_num_batched_tokens,
                   "token budget of one step")
      ->check(CLI::PositiveNumber);
  command->add_option("--max-queue", flags->engine.max_queue, "waiting requests before 429")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--max-model-len", flags->engine.max_model_len,
                   "context length (default: the model's max_position_embeddings)")
      ->check(CLI::PositiveNumber);
  command->add_option("--kv-blocks", flags->kv_blocks, "KV cache blocks (overrides --kv-memory-gb)")
      ->check(CLI::PositiveNumber);
  command->add_option("--kv-memory-gb", flags->kv_memory_gb, "KV cache size in GiB (default 2)");
  command->add_flag("--no-prefix-caching", flags->no_prefix_caching,
                    "do not reuse KV blocks across requests");
  command
      ->add_option("--http-threads", flags->http_threads,
                   "HTTP worker threads; each request being processed holds one, idle "
                   "connections none (default: --max-num-seqs + --max-queue + 16, at most 2048)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--max-connections", flags->http.max_connections,
                   "open HTTP connections, idle ones included; past it new ones get a 503 "
                   "(default 8192, lowered to fit the open-file limit)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--max-body-bytes", flags->http.max_body_bytes,
                   "request body limit (default 8 MiB)")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--request-timeout", flags->http.request_timeout_seconds,
                   "seconds a completion request may take, queueing included, before it is "
                   "cancelled (504, or finish_reason \"timeout\" in a stream); requests may set "
                   "their own \"timeout\" (default 0: none)")
      ->check(CLI::Range(0.0, kMaxTimeoutSeconds));
  command
      ->add_option("--shutdown-timeout", flags->shutdown_timeout_s,
                   "after SIGTERM / SIGINT, seconds requests in flight may run on before they "
                   "are cancelled (default 30; 0: cancel at once)")
      ->check(CLI::Range(0.0, kMaxTimeoutSeconds));
  command->add_flag("--no-access-log", flags->no_access_log, "no stderr line per HTTP response");
  command->add_flag("--no-web-ui", flags->no_web_ui,
                    "do not serve the web UI at / (it then answers 404 like any unknown route)");
  command->add_flag("--chat-content-special-tokens", flags->chat_content_special_tokens,
                    "let the text of chat requests (messages, tools, chat_template_kwargs) produce "
                    "special/control "
                    "tokens such as <|im_start|> or <|eot_id|>, as before; by default it is "
                    "tokenized as plain text so a request cannot forge the template's turns");
  command
      ->add_option("--stats-interval", flags->stats_interval_s,
                   "seconds between throughput log lines while busy (0: never)")
      ->check(CLI::NonNegativeNumber);
  return [flags] { return run_serve(*flags); };
}

}  // namespace specstack::cli

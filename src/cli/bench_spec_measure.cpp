#include "cli/bench_spec_measure.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli/bench_util.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {
namespace {

using SteadyClock = std::chrono::steady_clock;

// `max_tokens`: a steady step's plan holds at most this many tokens (batch x
// (k + 1)); more means prompt rows (the prefix-hit tail that gives every
// sequence its first token), whose cost is not a decode step's.
StepBreakdown breakdown(const std::vector<StepRecord>& records, int32_t batch, int32_t max_tokens) {
  StepBreakdown b;
  int n = 0, n_admission = 0;
  double admission = 0;
  for (size_t i = 0; i + 1 < records.size(); ++i) {
    const StepRecord& r = records[i];
    if (r.n_decode > 0 && r.n_tokens <= max_tokens) ++b.n_decode_steps;
    if (r.n_decode == batch && r.n_tokens <= max_tokens && r.n_draft_admitted > 0) {
      admission += r.seconds + records[i + 1].start_seconds - (r.start_seconds + r.seconds);
      ++n_admission;
    }
    // A step in which the draft admitted sequences hashed their prompts
    // through its prefix cache (8 ms of host work at 64 x 8K, once per run).
    if (r.n_decode != batch || r.n_tokens > max_tokens || r.n_draft_admitted > 0) continue;
    ++n;
    b.step += r.seconds;
    b.draft += r.draft_seconds;
    b.draft_first += r.draft_first_seconds;
    b.draft_forwards += r.draft_forward_seconds;
    b.draft_setup += r.draft_setup_seconds;
    b.schedule += r.schedule_seconds;
    b.forward += r.forward_seconds;
    b.gap += records[i + 1].start_seconds - (r.start_seconds + r.seconds);
    b.draft_tokens += r.n_draft_tokens;
  }
  if (n == 0) return b;
  for (double* v : {&b.step, &b.draft, &b.draft_first, &b.draft_forwards, &b.draft_setup,
                    &b.schedule, &b.forward, &b.gap})
    *v *= 1e3 / n;
  b.draft_tokens /= n;
  b.n_steps = n;
  b.rest = b.step - b.draft - b.schedule - b.forward;
  b.admission_excess = std::max(0.0, admission * 1e3 - n_admission * (b.step + b.gap));
  return b;
}

}  // namespace

ProbeStep::ProbeStep(ModelInstance& m, int32_t batch, int64_t context, int32_t rows,
                     const ProbeLayout& layout)
    : m_(m) {
  KvManager& kv = m.kv_manager();
  plan_.tokens_on_device = m.device() != Device::kCpu;
  const int64_t vocab = m.config().vocab_size;
  for (int32_t b = 0; b < batch; ++b) {
    if (b > 0 && layout.gap_tokens > 0) {
      gaps_.push_back(kv.new_sequence(KvSequenceOptions{0, false}));
      const auto gap = static_cast<int32_t>(layout.gap_tokens);
      SS_CHECK_MSG(kv.can_allocate(gaps_.back(), {}, gap), "bench spec: the KV pool is too small");
      kv.allocate(gaps_.back(), {}, gap);
    }
    seqs_.push_back(kv.new_sequence(KvSequenceOptions{0, false}));
    const int32_t total = static_cast<int32_t>(context) + rows;
    SS_CHECK_MSG(kv.can_allocate(seqs_.back(), {}, total), "bench spec: the KV pool is too small");
    kv.allocate(seqs_.back(), {}, total);
    for (int32_t r = 0; r < rows; ++r) {
      const auto slot = static_cast<int32_t>(context) + r;
      plan_.add_token(static_cast<int32_t>((b * 7919 + r * 104729 + 3) % vocab),
                      static_cast<int32_t>(slot + layout.position_offset), b, slot, true);
    }
    plan_.block_tables.push_back(seqs_.back().blocks());
    plan_.seq_n_slots.push_back(total);
  }
}

ProbeStep::~ProbeStep() {
  for (KvSequence& seq : seqs_) m_.kv_manager().free(seq);
  for (KvSequence& gap : gaps_) m_.kv_manager().free(gap);
}

double ProbeStep::time(int32_t repeats, const std::function<void()>& before) {
  std::vector<double> times;
  for (int32_t i = 0; i <= repeats; ++i) {
    if (before) before();
    const auto start = SteadyClock::now();
    run();
    if (i > 0) times.push_back(std::chrono::duration<double>(SteadyClock::now() - start).count());
  }
  return median(times);
}

double time_step(ModelInstance& m, int32_t batch, int64_t context, int32_t rows, int32_t repeats) {
  return ProbeStep(m, batch, context, rows).time(repeats);
}

Result<std::shared_ptr<grammar::TokenConstraint>> load_schema_constraint(
    const std::string& schema_path, const std::string& tokenizer_dir) {
  std::ifstream in(schema_path);
  if (!in) return make_error("cannot read the JSON schema " + schema_path);
  std::stringstream text;
  text << in.rdbuf();
  const auto schema = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  if (schema.is_discarded()) return make_error(schema_path + " is not JSON");
  auto gbnf = grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) return make_error(schema_path + ": " + gbnf.message());
  auto parsed = grammar::parse_gbnf(*gbnf);
  if (!parsed.ok()) return make_error(schema_path + ": " + parsed.message());
  auto tokenizer = Tokenizer::load_dir(tokenizer_dir);
  if (!tokenizer.ok()) return make_error(tokenizer.message());
  auto vocabulary = std::make_shared<const grammar::TokenVocabulary>(
      grammar::TokenVocabulary::from_tokenizer(*tokenizer));
  auto constraint = std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(parsed).value()), vocabulary);
  constraint->precompute();
  return constraint;
}

Result<DecodeRun> run_decode(ModelInstance& target, EngineOptions options,
                             const std::vector<std::vector<int32_t>>& prompts, int32_t gen,
                             std::shared_ptr<grammar::TokenConstraint> constraint) {
  options.record_steps = true;
  const ModelInstance* draft = options.specdecode.draft;
  const PrefixCacheStats draft_before = draft ? draft->pool().prefix_stats() : PrefixCacheStats{};
  Engine engine(target, options);
  const EngineMetrics before = engine.metrics();
  struct Trace {
    SteadyClock::time_point first, last;
    std::vector<std::pair<SteadyClock::time_point, int64_t>> events;
    std::string error;
  };
  std::vector<Trace> traces(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] {
      SamplingParams params;
      params.temperature = 0;
      params.max_tokens = gen;
      params.ignore_eos = true;
      RequestOptions request{prompts[i], params, 1, -1};
      request.constraint = constraint;
      auto stream = engine.submit(std::move(request));
      if (!stream.ok()) {
        traces[i].error = stream.message();
        return;
      }
      while (!(*stream)->done()) {
        auto event = (*stream)->next(std::chrono::milliseconds(1000));
        if (!event || event->tokens.empty()) continue;
        const auto now = SteadyClock::now();
        if (traces[i].events.empty()) traces[i].first = now;
        traces[i].last = now;
        traces[i].events.emplace_back(now, static_cast<int64_t>(event->tokens.size()));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const Trace& t : traces) {
    if (!t.error.empty()) return make_error("bench spec: " + t.error);
  }
  SteadyClock::time_point t0 = traces[0].first, t1 = traces[0].last;
  for (const Trace& t : traces) {
    t0 = std::max(t0, t.first);
    t1 = std::max(t1, t.last);
  }
  int64_t tokens = 0;
  for (const Trace& t : traces) {
    for (const auto& [time, n] : t.events) tokens += time > t0 ? n : 0;
  }
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  if (tokens == 0 || seconds <= 0) return make_error("bench spec: no decode tokens to time");
  DecodeRun run;
  run.tokens_per_second = static_cast<double>(tokens) / seconds;
  run.step_seconds = seconds * static_cast<double>(prompts.size()) / static_cast<double>(tokens);
  // The loop publishes metrics after each step: wait for the last one.
  EngineMetrics after = engine.metrics();
  for (int i = 0; i < 200 && (after.n_running > 0 || after.n_waiting > 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    after = engine.metrics();
  }
  run.drafted = after.specdecode_draft_tokens_total - before.specdecode_draft_tokens_total;
  run.accepted = after.specdecode_accepted_tokens_total - before.specdecode_accepted_tokens_total;
  run.verifications = after.specdecode_verify_total - before.specdecode_verify_total;
  const auto batch = static_cast<int32_t>(prompts.size());
  const int32_t rows = draft != nullptr ? options.specdecode.max_draft_tokens + 1 : 1;
  run.steps = breakdown(engine.step_records(), batch, batch * rows);
  if (draft != nullptr) {
    const PrefixCacheStats& s = draft->pool().prefix_stats();
    run.draft_query_tokens = s.n_query_tokens - draft_before.n_query_tokens;
    run.draft_hit_tokens = s.n_hit_tokens - draft_before.n_hit_tokens;
    run.draft_evictions = s.n_evictions - draft_before.n_evictions;
  }
  return run;
}

}  // namespace specstack::cli

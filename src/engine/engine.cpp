#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "engine/grammar_stage.h"
#include "engine/histogram.h"
#include "engine/logprobs.h"
#include "engine/scheduler.h"
#include "engine/specdecode_stage.h"
#include "engine/specprefill_stage.h"
#include "specprefill/policy.h"

namespace specstack {
namespace {

// Wakes the loop thread when work arrives (submit, cancel) and lets it sleep
// when idle. Shared with RequestStreams, which may outlive the engine.
struct LoopSignal {
  std::mutex mutex;
  std::condition_variable wake;
  bool pending = false;

  void notify() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pending = true;
    }
    wake.notify_all();
  }
};

class EngineRequestStream final : public RequestStream {
 public:
  EngineRequestStream(std::shared_ptr<StreamState> state, std::shared_ptr<LoopSignal> signal)
      : state_(std::move(state)), signal_(std::move(signal)) {}
  ~EngineRequestStream() override { cancel(); }  // an abandoned stream frees its blocks

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->ready.wait_for(lock, timeout, [&] {
      return !state_->events.empty() || state_->n_finished == state_->n_choices;
    });
    if (state_->events.empty()) return std::nullopt;
    RequestEvent event = std::move(state_->events.front());
    state_->events.pop_front();
    return event;
  }
  bool done() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->events.empty() && state_->n_finished == state_->n_choices;
  }
  void cancel() override {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      if (state_->n_finished == state_->n_choices) return;
    }
    if (!state_->cancel_requested.exchange(true)) signal_->notify();
  }
  RequestStats stats() const override {
    std::lock_guard<std::mutex> lock(state_->mutex);
    return state_->stats;
  }

 private:
  std::shared_ptr<StreamState> state_;
  std::shared_ptr<LoopSignal> signal_;
};

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25, 0.5,
          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0};
}

}  // namespace

class EngineCore {
 public:
  EngineCore(ModelInstance& model, const EngineOptions& options);
  ~EngineCore();

  Result<std::shared_ptr<RequestStream>> submit(RequestOptions options);
  EngineMetrics metrics() const;
  // Any thread: the cache's storage and the model never move after start-up.
  MemoryMetrics memory_metrics() const {
    MemoryMetrics m;
    m.kv_cache_bytes = static_cast<int64_t>(model_.kv().nbytes());
    m.kv_cache_resident_bytes = static_cast<int64_t>(model_.kv().resident_bytes());
    m.device_memory_used_bytes = model_.model().device_memory_used_bytes();
    return m;
  }
  int64_t max_context() const { return max_context_; }
  std::vector<StepRecord> step_records() const {
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    return step_records_;
  }

 private:
  void loop();
  void take_inbox();
  void start_request(std::unique_ptr<Request> request);
  void add_target_sequence(Request& request, SpecPrefillOutcome* outcome);
  void run_specprefill_step();
  void handle_cancellations();
  void step();
  // logits [vocab] of the sequence's last row, or (device greedy) null and
  // the token the model already chose (-1: the grammar admitted nothing).
  // (With chosen: `logprobs` are the chosen token's when the request asks
  // for them, computed by the model.)
  void on_logits(Sequence* seq, float* logits, int32_t chosen = -1,
                 const RowLogprobs* logprobs = nullptr);
  // A verification chunk's rows: [1 + n_draft, vocab] raw logits, or null and
  // the model's greedy ids, or neither and the model's own verification.
  // (With device_outcome: `logprobs` [1 + n_draft] the chunk's rows', whose
  // picked tokens are the emitted ones, when the request asks for them.)
  void on_verify(Sequence* seq, const float* rows, const int32_t* greedy_ids,
                 const VerifyOutcome* device_outcome = nullptr,
                 const RowLogprobs* logprobs = nullptr);
  // Appends generated tokens to one choice and streams them; stops at the
  // first that ends it (EOS, stop id, max_tokens, context). `logprob_rows`
  // [tokens.size(), vocab] raw logits when logprobs are asked for, or
  // picked_logprobs [tokens.size()]: theirs, computed by the model.
  // The grammar state is already past the first `n_grammar_advanced`
  // tokens (verified drafts, none completing the document but maybe the
  // last: VerifyResult::grammar_ended, which on_verify handles).
  void emit(Sequence* seq, std::span<const int32_t> tokens, const float* logprob_rows,
            Clock::time_point now, int32_t n_grammar_advanced = 0,
            std::span<const RowLogprobs> picked_logprobs = {});
  // How the step's logit rows get their tokens. With a model that picks
  // tokens (a GPU) and a row it may pick: plan.tokens_on_device, each row's
  // RowSampling (a sampled row's uniform drawn now from its sequence's own
  // generator, as Sampler::sample would) and plan.host_rows, the rows the
  // host samples itself (host_row_[r] = kHostRow); sampled verification
  // chunks whose draft kept its rows on the model's device are verified
  // there (plan.verifications; kVerifiedRow).
  void plan_token_picking(ScheduleResult& scheduled);
  // The grammar masks of a tokens_on_device step's picked rows into its
  // plan; dead[r] = 1 where logit row r's grammar admits nothing. Returns
  // the rows masked.
  int32_t fill_device_masks(ScheduleResult& scheduled, std::vector<uint8_t>& dead);
  void finish(Sequence* seq, FinishReason reason, RequestEvent event);
  void retire_finished_requests();
  void publish_metrics();

  ModelInstance& model_;
  EngineOptions options_;
  int64_t max_context_;
  int64_t vocab_;
  Scheduler scheduler_;
  std::unique_ptr<SpecPrefillStage> specprefill_;  // null without a draft model
  std::unique_ptr<SpecDecodeStage> specdecode_;    // null without speculative decoding
  GrammarStage grammar_;                           // constrained requests' masks
  LogitMasks mask_storage_;         // the plans' masks between steps (keeps the capacity)
  std::vector<uint8_t> dead_rows_;  // [logit rows] of the step: the grammar admits nothing
  // [logit rows] of the step: who picks its token.
  static constexpr uint8_t kPickedRow = 0;    // the model, by its RowSampling
  static constexpr uint8_t kHostRow = 1;      // the host, from downloaded logits
  static constexpr uint8_t kVerifiedRow = 2;  // the model's speculative verification
  std::vector<uint8_t> host_row_;
  LatencyHistogram accepted_length_{{}};  // accepted draft tokens per verification
  SpecPrefillPolicy specprefill_policy_;
  std::shared_ptr<LoopSignal> signal_ = std::make_shared<LoopSignal>();

  // Submitted, not yet seen by the loop (guarded by inbox_mutex_).
  std::mutex inbox_mutex_;
  std::vector<std::unique_ptr<Request>> inbox_;
  std::atomic<int64_t> n_queued_{0};  // inbox + waiting, for back-pressure
  uint64_t next_request_id_ = 1;

  // Loop-thread state.
  std::vector<std::unique_ptr<Request>> requests_;
  LatencyHistogram ttft_{latency_buckets()};
  LatencyHistogram itl_{latency_buckets()};
  EngineMetrics counters_;

  mutable std::mutex metrics_mutex_;
  EngineMetrics published_;
  std::vector<StepRecord> step_records_;  // guarded by metrics_mutex_
  const Clock::time_point start_time_ = Clock::now();

  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

EngineCore::EngineCore(ModelInstance& model, const EngineOptions& options)
    : model_(model),
      options_(options),
      max_context_(options.max_model_len > 0 ? options.max_model_len
                                             : model.config().max_position_embeddings),
      vocab_(model.config().vocab_size),
      scheduler_(model.kv_manager(),
                 SchedulerOptions{options.max_num_batched_tokens, options.max_num_seqs,
                                  options.enable_prefix_caching, options.static_batching}),
      grammar_(model.config().eos_token_ids),
      specprefill_policy_(SpecPrefillPolicyOptions{options.specprefill.draft != nullptr,
                                                   options.specprefill.threshold,
                                                   options.specprefill.keep_pct}) {
  if (max_context_ <= 0) max_context_ = 4096;
  if (options.specprefill.draft != nullptr) {
    const ModelConfig& config = model.config();
    specprefill_ =
        std::make_unique<SpecPrefillStage>(options.specprefill, options.max_num_batched_tokens,
                                           config.sliding_window > 0 ? config.sliding_window : 0);
  }
  if (options.specdecode.draft != nullptr) {
    specdecode_ = std::make_unique<SpecDecodeStage>(
        options.specdecode, options.max_num_batched_tokens, model.config(),
        model.model().weight_bytes(), grammar_,
        model.runner().verifies_drafts_of(options.specdecode.draft->runner()));
    std::vector<double> bounds;
    for (int32_t k = 0; k <= options.specdecode.max_draft_tokens; ++k) bounds.push_back(k);
    accepted_length_ = LatencyHistogram(std::move(bounds));
  }
  publish_metrics();
  thread_ = std::thread([this] { loop(); });
}

EngineCore::~EngineCore() {
  stopping_ = true;
  signal_->notify();
  thread_.join();
  // Whatever is left ends as aborted so no reader waits forever.
  take_inbox();
  for (auto& request : requests_) {
    for (auto& seq : request->sequences) {
      if (seq->finished) continue;
      scheduler_.remove(seq.get());
      seq->finished = true;
      request->stream->push(RequestEvent{seq->choice, {}, {}, FinishReason::kFinishAbort});
    }
    // Choices that never got a sequence (still in draft scoring, or not forked yet).
    for (auto c = static_cast<int32_t>(request->sequences.size()); c < request->options.n; ++c) {
      request->stream->push(RequestEvent{c, {}, {}, FinishReason::kFinishAbort});
    }
  }
}

Result<std::shared_ptr<RequestStream>> EngineCore::submit(RequestOptions options) {
  SS_TRY(options.params.validate());
  if (options.prompt.empty()) return make_error("the prompt is empty");
  for (int32_t id : options.prompt) {
    if (id < 0 || id >= vocab_)
      return errorf("prompt token id {} is out of range [0, {})", id, vocab_);
  }
  if (options.constraint_trigger &&
      (options.constraint == nullptr || options.constraint_trigger->text.empty())) {
    return make_error("a constraint trigger needs a constraint and a non-empty text");
  }
  if (options.n < 1 || options.n > 16) return errorf("n must be in [1, 16], got {}", options.n);
  if (options.top_logprobs < -1 || options.top_logprobs > 20) {
    return errorf("top_logprobs must be in [0, 20], got {}", options.top_logprobs);
  }
  const int64_t total = static_cast<int64_t>(options.prompt.size()) + options.params.max_tokens;
  if (total > max_context_) {
    return errorf(
        "This model's maximum context length is {} tokens. However, you requested {} tokens "
        "({} in the prompt, {} in the completion).",
        max_context_, total, options.prompt.size(), options.params.max_tokens);
  }
  const int64_t block_size = model_.kv_manager().block_size();
  const int64_t blocks_needed = (total + block_size - 1) / block_size;
  if (blocks_needed > model_.pool().n_blocks()) {
    return errorf("prompt + max_tokens = {} tokens can never fit in the KV cache of {} tokens",
                  total, model_.pool().n_blocks() * block_size);
  }
  if (options.specprefill.keep_pct) SS_TRY(validate_keep_pct(*options.specprefill.keep_pct));
  if (n_queued_.load() >= options_.max_queue) {
    return make_error(
        fmt::format("the waiting queue is full ({} requests); retry later", options_.max_queue),
        ErrorCode::kErrorResourceExhausted);
  }
  auto request = std::make_unique<Request>();
  request->options = std::move(options);
  request->arrival = Clock::now();
  request->stream = std::make_shared<StreamState>();
  request->stream->n_choices = request->options.n;
  request->stream->stats.prompt_tokens = static_cast<int64_t>(request->options.prompt.size());
  auto stream = std::make_shared<EngineRequestStream>(request->stream, signal_);
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    request->id = next_request_id_++;
    inbox_.push_back(std::move(request));
  }
  ++n_queued_;
  signal_->notify();
  return std::shared_ptr<RequestStream>(std::move(stream));
}

void EngineCore::take_inbox() {
  std::vector<std::unique_ptr<Request>> incoming;
  {
    std::lock_guard<std::mutex> lock(inbox_mutex_);
    incoming.swap(inbox_);
  }
  for (auto& request : incoming) start_request(std::move(request));
}

void EngineCore::start_request(std::unique_ptr<Request> request) {
  Request& r = *request;
  requests_.push_back(std::move(request));
  const bool speculates = specdecode_ && specdecode_->speculates(r);
  if (speculates) {
    std::lock_guard<std::mutex> lock(r.stream->mutex);
    r.stream->stats.speculative.enabled = true;
  }
  if (specprefill_) {
    // The threshold applies to the suffix after the target's cached prefix.
    const CachedPrefix prefix = model_.kv_manager().find_cached_prefix(r.options.prompt, 0);
    SpecPrefillRequest ask;
    ask.n_prompt_tokens = static_cast<int64_t>(r.options.prompt.size());
    ask.n_cached_tokens = options_.enable_prefix_caching ? prefix.n_tokens : 0;
    ask.specprefill = r.options.specprefill.enabled;
    ask.specprefill_keep_pct = r.options.specprefill.keep_pct;
    auto decision = specprefill_policy_.decide(ask);  // keep_pct was validated by submit()
    if (decision.ok() && decision->apply) {
      // One draft for both stages: its prompt KV goes on to speculative decoding.
      const bool keep_draft_kv =
          speculates && options_.specdecode.draft == options_.specprefill.draft;
      specprefill_->add(&r, static_cast<int32_t>(decision->position_offset), decision->keep_pct,
                        keep_draft_kv);
      return;
    }
  }
  add_target_sequence(r, nullptr);
}

// The request's first target sequence: dense, or the sparse selection of a
// speculative prefill (never published under dense token hashes).
void EngineCore::add_target_sequence(Request& request, SpecPrefillOutcome* outcome) {
  const bool sparse = outcome != nullptr && outcome->applied;
  auto seq = std::make_unique<Sequence>(
      model_.kv_manager().new_sequence(KvSequenceOptions{0, /*publishable=*/!sparse}));
  seq->request = &request;
  seq->choice = 0;
  if (sparse) {
    seq->tokens = std::move(outcome->tokens);
    seq->positions = std::move(outcome->positions);
    seq->prefix_lookup_tokens = outcome->prefix_tokens;
  } else {
    seq->tokens = request.options.prompt;
  }
  if (outcome != nullptr) {
    std::lock_guard<std::mutex> lock(request.stream->mutex);
    request.stream->stats.specprefill = outcome->stats;
  }
  seq->sampler.emplace(request.options.params, request.options.prompt);
  grammar_.attach(*seq);
  if (outcome != nullptr && outcome->draft_kv) {
    specdecode_->adopt(seq.get(), std::move(*outcome->draft_kv),
                       static_cast<int32_t>(request.options.prompt.size()));
  }
  scheduler_.add_waiting(seq.get());
  request.sequences.push_back(std::move(seq));
}

void EngineCore::run_specprefill_step() {
  if (!specprefill_ || specprefill_->n_jobs() == 0) return;
  // With no running stream to delay, the lookahead may run its steps in one go.
  for (SpecPrefillOutcome& outcome : specprefill_->step(scheduler_.n_running() == 0)) {
    if (outcome.applied) {
      ++counters_.specprefill_applied_total;
      counters_.specprefill_tokens_saved_total +=
          outcome.stats.prompt_tokens - outcome.stats.kept_tokens;
    } else {
      ++counters_.specprefill_fallback_total;
    }
    add_target_sequence(*outcome.request, &outcome);
  }
}

void EngineCore::finish(Sequence* seq, FinishReason reason, RequestEvent event) {
  scheduler_.remove(seq);
  if (specdecode_) specdecode_->release(seq);
  seq->finished = true;
  event.finish = reason;
  seq->request->stream->push(std::move(event));
  if (reason == FinishReason::kFinishAbort) {
    ++counters_.requests_aborted_total;
  }
}

void EngineCore::handle_cancellations() {
  for (auto& request : requests_) {
    if (!request->stream->cancel_requested.load()) continue;
    if (specprefill_) specprefill_->remove(request.get());
    for (auto& seq : request->sequences) {
      if (!seq->finished)
        finish(seq.get(), FinishReason::kFinishAbort, RequestEvent{seq->choice, {}, {}, {}});
    }
    // Choices not forked yet will never run: close them too.
    for (int32_t c = static_cast<int32_t>(request->sequences.size()); c < request->options.n; ++c) {
      request->stream->push(RequestEvent{c, {}, {}, FinishReason::kFinishAbort});
    }
    request->options.n = static_cast<int32_t>(request->sequences.size());
  }
}

void EngineCore::retire_finished_requests() {
  auto done = [](const std::unique_ptr<Request>& request) {
    if (static_cast<int32_t>(request->sequences.size()) < request->options.n) return false;
    return std::all_of(request->sequences.begin(), request->sequences.end(),
                       [](const auto& seq) { return seq->finished; });
  };
  for (auto& request : requests_) {
    if (done(request)) ++counters_.requests_finished_total;
  }
  requests_.erase(std::remove_if(requests_.begin(), requests_.end(), done), requests_.end());
}

namespace {

// The sequence's next row is the prompt's last: with n > 1 every choice
// forks from it and samples its own first token from the same logits.
bool forks_choices(const Sequence& seq) {
  return seq.request->options.n > 1 && seq.n_generated == 0 && seq.request->sequences.size() == 1 &&
         seq.choice == 0;
}

// A logit row the host samples itself, from its logits: penalties need
// them, the row n > 1 choices fork from is sampled once per choice, sampled
// speculative verification compares whole distributions, and a
// verification's logprobs are of the tokens it accepts. (A picked row's
// logprobs come with its token: ForwardBatch::top_logprobs.)
bool needs_host_logits(const ScheduledChunk& chunk) {
  const Sequence& seq = *chunk.seq;
  const RequestOptions& o = seq.request->options;
  const SamplingParams& p = o.params;
  if (p.has_penalties()) return true;
  if (chunk.n_logit_rows > 1 && (!seq.sampler->greedy() || o.top_logprobs >= 0)) return true;
  return forks_choices(seq);
}

}  // namespace

void EngineCore::plan_token_picking(ScheduleResult& scheduled) {
  StepPlan& plan = scheduled.plan;
  host_row_.assign(plan.logit_rows.size(), kHostRow);
  if (!model_.runner().picks_tokens()) return;
  bool any_picked = false;
  size_t row = 0;
  for (const ScheduledChunk& chunk : scheduled.chunks) {
    if (!chunk.wants_logits) continue;
    uint8_t who = needs_host_logits(chunk) ? kHostRow : kPickedRow;
    if (chunk.n_logit_rows > 1 && specdecode_ && specdecode_->verified_on_device(chunk.seq)) {
      who = kVerifiedRow;
    }
    std::fill_n(host_row_.begin() + static_cast<std::ptrdiff_t>(row), chunk.n_logit_rows, who);
    any_picked |= who != kHostRow;
    row += static_cast<size_t>(chunk.n_logit_rows);
  }
  if (!any_picked) return;
  plan.tokens_on_device = true;
  plan.sampling.assign(plan.logit_rows.size(), RowSampling{});
  row = 0;
  for (const ScheduledChunk& chunk : scheduled.chunks) {
    if (!chunk.wants_logits) continue;
    if (host_row_[row] == kHostRow) {
      for (int32_t i = 0; i < chunk.n_logit_rows; ++i) {
        plan.host_rows.push_back(static_cast<int32_t>(row) + i);
      }
    } else if (host_row_[row] == kVerifiedRow) {
      // Its rows take the argmax; the verification then makes them the
      // tokens it emitted, whose logprobs the model computes where asked.
      plan.verifications.push_back(specdecode_->verification(chunk.seq, static_cast<int32_t>(row)));
      plan.draft_rows = specdecode_->kept_rows();
      const int32_t top_logprobs = chunk.seq->request->options.top_logprobs;
      if (top_logprobs >= 0) {
        if (plan.top_logprobs.empty()) plan.top_logprobs.assign(plan.logit_rows.size(), -1);
        std::fill_n(plan.top_logprobs.begin() + static_cast<std::ptrdiff_t>(row),
                    chunk.n_logit_rows, top_logprobs);
      }
    } else {
      // A picked sampled chunk has one row (a sampled verification is host
      // rows or a kVerifiedRow chunk); a greedy one, every row included,
      // takes the argmax.
      plan.sampling[row] = chunk.seq->sampler->device_draw();
      const int32_t top_logprobs = chunk.seq->request->options.top_logprobs;
      if (top_logprobs >= 0) {  // one row: verifications with logprobs are host rows
        if (plan.top_logprobs.empty()) plan.top_logprobs.assign(plan.logit_rows.size(), -1);
        plan.top_logprobs[row] = top_logprobs;
      }
    }
    row += static_cast<size_t>(chunk.n_logit_rows);
  }
}

int32_t EngineCore::fill_device_masks(ScheduleResult& scheduled, std::vector<uint8_t>& dead) {
  LogitMasks& masks = scheduled.plan.masks;
  masks = std::move(mask_storage_);
  const size_t n_rows = scheduled.plan.logit_rows.size();
  masks.reset(n_rows, vocab_);
  dead.assign(n_rows, 0);
  int32_t n_masked = 0;
  size_t row = 0;
  for (const ScheduledChunk& chunk : scheduled.chunks) {
    if (!chunk.wants_logits) continue;
    if (host_row_[row] != kPickedRow) {  // the host masks its logits itself (on_logits / verify)
      row += static_cast<size_t>(chunk.n_logit_rows);
      continue;
    }
    // A verification chunk's row i: the parser state after its draft tokens 0..i-1.
    for (int32_t i = 0; i < chunk.n_logit_rows; ++i) {
      grammar::TriggeredMatcher* state = chunk.seq->grammar_at_row(i);
      if (state == nullptr) break;
      const size_t r = row + static_cast<size_t>(i);
      switch (grammar_.fill_mask(*chunk.seq, *state, masks.add(r))) {
        case MaskFill::kMaskNone:
        case MaskFill::kMaskUnknown:  // (fill_mask makes every mask)
          masks.drop_last(r);
          break;
        case MaskFill::kMaskFilled:
          ++n_masked;
          break;
        case MaskFill::kMaskDeadEnd:
          // Only a verification's last row can be one (drafting stops where
          // the grammar does): SpecDecodeStage::verify drops its token.
          masks.drop_last(r);
          dead[r] = 1;
          break;
      }
    }
    row += static_cast<size_t>(chunk.n_logit_rows);
  }
  return n_masked;
}

void EngineCore::on_logits(Sequence* seq, float* logits, int32_t chosen,
                           const RowLogprobs* logprobs) {
  Request& request = *seq->request;
  const bool first_of_prompt = forks_choices(*seq);
  // n > 1: the prompt's KV is shared by forks that each sample their own token.
  std::vector<Sequence*> samplers = {seq};
  if (first_of_prompt) {
    for (int32_t c = 1; c < request.options.n; ++c) {
      auto child = std::make_unique<Sequence>(model_.kv_manager().fork(seq->kv));
      child->request = &request;
      child->choice = c;
      child->tokens = seq->tokens;
      child->positions = seq->positions;
      child->prefix_lookup_tokens = seq->prefix_lookup_tokens;
      child->n_computed = seq->n_computed;
      child->admitted = true;
      SamplingParams params = request.options.params;
      if (params.seed) params.seed = *params.seed + static_cast<uint64_t>(c);
      child->sampler.emplace(params, request.options.prompt);
      grammar_.attach(*child);
      scheduler_.add_running(child.get());
      samplers.push_back(child.get());
      request.sequences.push_back(std::move(child));
    }
  }
  const auto now = Clock::now();
  if (!request.first_token_sent) {
    request.first_token_sent = true;
    const std::chrono::duration<double> ttft = now - request.arrival;
    ttft_.observe(ttft.count());
    std::lock_guard<std::mutex> lock(request.stream->mutex);
    request.stream->stats.ttft_ms = ttft.count() * 1e3;
  }
  // Sampling modifies the row in place: keep the raw logits when they are
  // needed again (another fork samples from them, or logprobs are reported).
  const bool keep_raw =
      logits != nullptr && (samplers.size() > 1 || request.options.top_logprobs >= 0);
  std::vector<float> raw;
  if (keep_raw) raw.assign(logits, logits + vocab_);
  for (Sequence* s : samplers) {
    std::vector<float> copy;
    std::span<float> row;
    if (logits != nullptr) row = std::span<float>(logits, static_cast<size_t>(vocab_));
    if (keep_raw) {
      copy = raw;
      row = std::span<float>(copy);
    }
    // A dead end: no token continues the document and it may not end here
    // (found before the forward on the device path: chosen < 0).
    bool dead_end = chosen < 0;
    if (logits != nullptr && s->grammar) {
      const auto mask_start = Clock::now();
      dead_end = !grammar_.mask(*s, row);
      counters_.grammar_mask_seconds_total +=
          std::chrono::duration<double>(Clock::now() - mask_start).count();
    } else if (logits != nullptr) {
      dead_end = false;
    }
    if (dead_end) {
      finish(s, FinishReason::kFinishStop, RequestEvent{s->choice, {}, {}, {}});
      continue;
    }
    const int32_t token = logits == nullptr ? chosen : s->sampler->sample(row);
    emit(s, std::span<const int32_t>(&token, 1), raw.empty() ? nullptr : raw.data(), now, 0,
         logprobs != nullptr ? std::span<const RowLogprobs>(logprobs, 1)
                             : std::span<const RowLogprobs>());
  }
}

void EngineCore::emit(Sequence* s, std::span<const int32_t> tokens, const float* logprob_rows,
                      Clock::time_point now, int32_t n_grammar_advanced,
                      std::span<const RowLogprobs> picked_logprobs) {
  Request& request = *s->request;
  const ModelConfig& config = model_.config();
  const SamplingParams& params = request.options.params;
  RequestEvent event;
  event.choice = s->choice;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t token = tokens[i];
    const auto accept_start = s->grammar ? Clock::now() : Clock::time_point{};
    const GrammarOutcome grammar = static_cast<int32_t>(i) < n_grammar_advanced
                                       ? GrammarOutcome::kGrammarContinue
                                       : grammar_.accept(*s, token);
    if (s->grammar) {
      counters_.grammar_accept_seconds_total +=
          std::chrono::duration<double>(Clock::now() - accept_start).count();
    }
    if (grammar == GrammarOutcome::kGrammarRejected) {
      // Only when the grammar admitted nothing the sampler could pick (all
      // admitted logits -inf): end the choice rather than break the grammar.
      finish(s, FinishReason::kFinishStop, std::move(event));
      return;
    }
    if (request.options.top_logprobs >= 0 && !picked_logprobs.empty()) {
      SS_CHECK_EQ(tokens.size(), picked_logprobs.size());
      event.logprobs.push_back(to_token_logprob(token, picked_logprobs[i]));
    } else if (request.options.top_logprobs >= 0) {
      SS_CHECK(logprob_rows != nullptr);
      event.logprobs.push_back(compute_logprobs(logprob_rows + static_cast<int64_t>(i) * vocab_,
                                                vocab_, token, request.options.top_logprobs));
    }
    event.tokens.push_back(token);
    // Tokens accepted together arrive together: the gap is the step's.
    if (s->n_generated > 0 && i == 0)
      itl_.observe(std::chrono::duration<double>(now - s->last_token_time).count());
    s->last_token_time = now;
    s->tokens.push_back(token);
    ++s->n_generated;
    ++counters_.generation_tokens_total;
    {
      std::lock_guard<std::mutex> lock(request.stream->mutex);
      ++request.stream->stats.generated_tokens;
    }
    const bool eos = !params.ignore_eos &&
                     std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), token) !=
                         config.eos_token_ids.end();
    const bool stop_id = std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                   token) != params.stop_token_ids.end();
    if (eos || stop_id || grammar == GrammarOutcome::kGrammarComplete) {
      finish(s, FinishReason::kFinishStop, std::move(event));
      return;
    }
    if (s->n_generated >= params.max_tokens ||
        static_cast<int64_t>(s->tokens.size()) >= max_context_) {
      finish(s, FinishReason::kFinishLength, std::move(event));
      return;
    }
  }
  request.stream->push(std::move(event));
}

void EngineCore::on_verify(Sequence* seq, const float* rows, const int32_t* greedy_ids,
                           const VerifyOutcome* device_outcome, const RowLogprobs* logprobs) {
  const int32_t n_draft = seq->n_draft;
  VerifyResult verified = specdecode_->verify(seq, rows, greedy_ids, vocab_, device_outcome);
  // The target's KV holds the pending token and every draft token; keep the
  // accepted ones. The emitted tokens are re-appended by emit(): drop the
  // draft tokens from the list first (their KV stays for the accepted ones).
  model_.kv_manager().rollback(seq->kv, n_draft - verified.n_accepted);
  seq->n_computed -= n_draft - verified.n_accepted;
  seq->trim_draft(0);
  counters_.specdecode_draft_tokens_total += verified.n_drafted;
  counters_.specdecode_accepted_tokens_total += verified.n_accepted;
  ++counters_.specdecode_verify_total;
  if (device_outcome != nullptr) ++counters_.specdecode_device_verify_total;
  accepted_length_.observe(verified.n_accepted);
  {
    std::lock_guard<std::mutex> lock(seq->request->stream->mutex);
    seq->request->stream->stats.speculative.draft_tokens += verified.n_drafted;
    seq->request->stream->stats.speculative.accepted_tokens += verified.n_accepted;
  }
  emit(seq, verified.tokens, rows, Clock::now(), verified.n_grammar_advanced,
       logprobs != nullptr ? std::span<const RowLogprobs>(logprobs, verified.tokens.size())
                           : std::span<const RowLogprobs>());
  // The accepted draft tokens left the grammar where nothing may follow (a
  // complete document or a dead end): the choice ends here, with "stop".
  if (verified.grammar_ended && !seq->finished) {
    finish(seq, FinishReason::kFinishStop, RequestEvent{seq->choice, {}, {}, {}});
  }
}

void EngineCore::step() {
  run_specprefill_step();  // draft work first: finished selections can be admitted now
  const auto step_start = Clock::now();
  // Draft tokens for the sequences that speculate, verified in this step.
  const SpecDecodeStage::ProposeStats proposed =
      specdecode_ ? specdecode_->propose(scheduler_.running()) : SpecDecodeStage::ProposeStats{};
  const auto schedule_start = Clock::now();
  ScheduleResult scheduled = scheduler_.schedule();
  for (Sequence* seq : scheduled.preempted) {
    if (specdecode_) specdecode_->release(seq);
    std::lock_guard<std::mutex> lock(seq->request->stream->mutex);
    ++seq->request->stream->stats.preemptions;
  }
  if (scheduled.empty()) {
    if (specdecode_) specdecode_->end_step();
    return;
  }
  plan_token_picking(scheduled);
  // Grammar masks for the device: made while the model's forward runs
  // (ModelRunner calls this once the forward is queued).
  int32_t n_device_masked = 0;
  double grammar_seconds = 0;
  if (scheduled.plan.tokens_on_device) {
    scheduled.plan.fill_masks = [&] {
      const auto start = Clock::now();
      n_device_masked = fill_device_masks(scheduled, dead_rows_);
      grammar_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    };
  }
  const auto forward_start = Clock::now();
  for (const ScheduledChunk& chunk : scheduled.chunks) {
    Request& request = *chunk.seq->request;
    if (request.scheduled) continue;
    request.scheduled = true;
    std::lock_guard<std::mutex> lock(request.stream->mutex);
    request.stream->stats.queue_ms =
        std::chrono::duration<double, std::milli>(forward_start - request.arrival).count();
  }
  StepOutput output = model_.runner().run(scheduled.plan);
  const auto forward_end = Clock::now();
  if (scheduled.plan.tokens_on_device) mask_storage_ = std::move(scheduled.plan.masks);
  scheduler_.commit(scheduled);
  ++counters_.steps_total;
  counters_.forward_seconds_total +=
      std::chrono::duration<double>(forward_end - forward_start).count();
  counters_.grammar_mask_seconds_total += grammar_seconds;
  int64_t row = 0;
  int64_t host_row = 0;   // into output.logits
  size_t n_verified = 0;  // into output.verified
  int32_t n_emitting = 0;
  const bool picked = scheduled.plan.tokens_on_device;
  double host_sampling_seconds = 0;  // rows sampled here from downloaded logits
  for (const ScheduledChunk& chunk : scheduled.chunks) {
    if (chunk.seq->n_generated == 0) counters_.prompt_tokens_total += chunk.count;
    if (!chunk.wants_logits) continue;
    ++n_emitting;
    const auto r = static_cast<size_t>(row);
    float* logits = nullptr;  // [n_logit_rows, vocab] when the host samples the chunk
    if (!picked || host_row_[r] == kHostRow) {
      logits = output.logits.f32() + host_row * vocab_;
      host_row += chunk.n_logit_rows;
    }
    const auto emit_start = Clock::now();
    if (picked && host_row_[r] == kVerifiedRow) {
      const RowLogprobs* logprobs = output.logprobs.empty() ? nullptr : &output.logprobs[r];
      on_verify(chunk.seq, nullptr, nullptr, &output.verified[n_verified++], logprobs);
    } else if (chunk.n_logit_rows > 1) {
      on_verify(chunk.seq, logits, logits != nullptr ? nullptr : output.picked_tokens.data() + row);
    } else if (logits == nullptr) {
      const RowLogprobs* logprobs = output.logprobs.empty() ? nullptr : &output.logprobs[r];
      on_logits(chunk.seq, nullptr, dead_rows_[r] != 0 ? -1 : output.picked_tokens[r], logprobs);
    } else {
      on_logits(chunk.seq, logits);
    }
    if (logits != nullptr) {
      host_sampling_seconds += std::chrono::duration<double>(Clock::now() - emit_start).count();
    }
    row += chunk.n_logit_rows;
  }
  // The k policy's cost line is of decode and verify steps (every row wants
  // logits); a prefill chunk's rows cost differently and would bend it. A
  // step's cost is its forward plus what the host spent sampling rows from
  // downloaded logits (sampled verification at a large batch: many times
  // the forward), so speculation that only pays on paper switches off.
  const bool decode_shaped =
      std::all_of(scheduled.chunks.begin(), scheduled.chunks.end(),
                  [](const ScheduledChunk& c) { return c.n_logit_rows == c.count; });
  if (specdecode_ && decode_shaped) {
    specdecode_->observe_target_step(
        static_cast<int32_t>(scheduled.plan.n_tokens()),
        std::chrono::duration<double>(forward_end - forward_start).count() + host_sampling_seconds);
  }
  if (specdecode_) specdecode_->end_step();
  counters_.step_seconds_total += std::chrono::duration<double>(Clock::now() - step_start).count();
  if (options_.record_steps) {
    const auto now = Clock::now();
    StepRecord record;
    record.start_seconds = std::chrono::duration<double>(step_start - start_time_).count();
    record.seconds = std::chrono::duration<double>(now - step_start).count();
    record.draft_seconds = std::chrono::duration<double>(schedule_start - step_start).count();
    record.schedule_seconds = std::chrono::duration<double>(forward_start - schedule_start).count();
    record.grammar_seconds = grammar_seconds;
    record.n_device_masked = n_device_masked;
    record.forward_seconds = std::chrono::duration<double>(forward_end - forward_start).count();
    record.n_tokens = static_cast<int32_t>(scheduled.plan.n_tokens());
    record.n_draft_tokens = proposed.n_tokens;
    record.draft_first_seconds = proposed.first_forward_seconds;
    record.draft_forward_seconds = proposed.forward_seconds;
    record.draft_setup_seconds = proposed.setup_seconds;
    record.n_draft_admitted = proposed.n_admitted;
    record.n_decode = n_emitting;
    record.n_running = static_cast<int32_t>(scheduler_.n_running());
    std::lock_guard<std::mutex> lock(metrics_mutex_);
    step_records_.push_back(record);
  }
}

void EngineCore::publish_metrics() {
  EngineMetrics m = counters_;
  m.n_waiting = static_cast<int64_t>(scheduler_.n_waiting()) +
                static_cast<int64_t>(specprefill_ ? specprefill_->n_jobs() : 0);
  m.n_running = static_cast<int64_t>(scheduler_.n_running());
  const BlockPool& pool = model_.pool();
  m.kv_blocks_total = pool.n_blocks();
  m.kv_blocks_free = pool.n_free();
  m.kv_blocks_cached = pool.n_cached();
  m.prefix_cache_queried_tokens = pool.prefix_stats().n_query_tokens;
  m.prefix_cache_hit_tokens = pool.prefix_stats().n_hit_tokens;
  m.preemptions_total = scheduler_.n_preemptions();
  m.specdecode_accepted_length = accepted_length_.snapshot();
  const ModelInstance* draft =
      options_.specdecode.draft != nullptr ? options_.specdecode.draft : options_.specprefill.draft;
  if (draft != nullptr) {
    m.draft_kv_blocks_total = draft->pool().n_blocks();
    m.draft_kv_blocks_free = draft->pool().n_free();
  }
  m.time_to_first_token = ttft_.snapshot();
  m.inter_token_latency = itl_.snapshot();
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  published_ = std::move(m);
}

void EngineCore::loop() {
  while (!stopping_) {
    take_inbox();
    handle_cancellations();
    retire_finished_requests();
    step();
    retire_finished_requests();
    n_queued_ = static_cast<int64_t>(scheduler_.n_waiting()) + [&] {
      std::lock_guard<std::mutex> lock(inbox_mutex_);
      return static_cast<int64_t>(inbox_.size());
    }();
    publish_metrics();
    const bool draft_idle = !specprefill_ || specprefill_->n_jobs() == 0;
    if (scheduler_.n_running() == 0 && scheduler_.n_waiting() == 0 && draft_idle) {
      std::unique_lock<std::mutex> lock(signal_->mutex);
      signal_->wake.wait(lock, [&] { return signal_->pending || stopping_; });
      signal_->pending = false;
    }
  }
}

EngineMetrics EngineCore::metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mutex_);
  return published_;
}

Engine::Engine(ModelInstance& model, const EngineOptions& options)
    : core_(std::make_unique<EngineCore>(model, options)) {}
Engine::~Engine() = default;
Result<std::shared_ptr<RequestStream>> Engine::submit(RequestOptions options) {
  return core_->submit(std::move(options));
}
EngineMetrics Engine::metrics() const {
  return core_->metrics();
}
MemoryMetrics Engine::memory_metrics() const {
  return core_->memory_metrics();
}
int64_t Engine::max_context() const {
  return core_->max_context();
}
std::vector<StepRecord> Engine::step_records() const {
  return core_->step_records();
}

}  // namespace specstack

// The engine as the server sees it: submit a request, read its events from a
// stream, cancel it, read metrics. Thread-safe; HTTP worker threads call it
// while the engine loop thread owns all model state. An interface so the
// server can be tested against a fake.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/sampling_params.h"
#include "grammar/grammar_trigger.h"
#include "grammar/token_constraint.h"

namespace specstack {

// kFinishTimeout and kFinishShutdown are the server's: it ends a request
// whose deadline passed, or that a shutdown cut short; the engine itself
// only ever ends a request with the first three.
enum class FinishReason {
  kFinishLength,
  kFinishStop,
  kFinishAbort,
  kFinishTimeout,
  kFinishShutdown
};

// Per-request speculative prefill controls (OpenAI body: `specprefill`,
// `specprefill_keep_pct`, top level or in extra_body).
struct SpecPrefillControls {
  std::optional<bool> enabled;     // true: force on below the threshold; false: off
  std::optional<double> keep_pct;  // (0, 1]; default: the server's --specprefill-keep-pct
};

// Per-request speculative decoding control (OpenAI body:
// `speculative_decoding`, top level or in extra_body). Unset: the server's
// default (--spec-decode).
struct SpecDecodeControls {
  std::optional<bool> enabled;
};

struct RequestOptions {
  std::vector<int32_t> prompt;  // token ids (already templated and tokenized)
  SamplingParams params;        // validated by submit()
  int32_t n = 1;                // parallel samples sharing the prompt's KV (copy-on-write)
  int32_t top_logprobs = -1;    // -1: no logprobs; 0..20: sampled token + this many alternatives
  SpecPrefillControls specprefill{};
  SpecDecodeControls specdecode{};
  // Grammar-constrained decoding (engine/grammar_stage.h): every choice's
  // output is a sentence of this grammar. Null: unconstrained. Shared: the
  // server caches one per grammar text, and its mask cache with it.
  std::shared_ptr<grammar::TokenConstraint> constraint = nullptr;
  // Set: the constraint applies lazily, from the trigger on (tool_choice
  // "auto": free text until the call's opening marker); unset: from the
  // first token (grammar/grammar_trigger.h).
  std::optional<grammar::GrammarTrigger> constraint_trigger = std::nullopt;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;                           // log-softmax of the raw logits
  std::vector<std::pair<int32_t, float>> top;  // best alternatives, descending
};

// One step's output for one choice, or that choice's end.
struct RequestEvent {
  int32_t choice = 0;                  // 0..n-1
  std::vector<int32_t> tokens;         // newly generated ids (may be empty on a pure finish event)
  std::vector<TokenLogprob> logprobs;  // parallel to tokens when top_logprobs >= 0
  std::optional<FinishReason> finish;  // set on the choice's last event
};

// Which chunks speculative prefill kept for one request: what the web UI's
// SpecPrefill view draws (usage.specprefill.selection, on request). The stage
// fills it whenever it applies; it is n_chunks floats, nothing next to the
// scoring that produced them, so no flag has to reach the engine.
struct SpecPrefillSelection {
  int64_t chunk = 0;           // tokens per chunk; only the last may be short
  int64_t first_position = 0;  // P: chunk i covers [P + i * chunk, min(P + (i + 1) * chunk, M))
  std::vector<float> chunk_scores;   // [n_chunks] mean draft importance per chunk
  std::vector<int32_t> kept_chunks;  // ascending chunk indices the target prefilled
};

// What speculative prefill did for one request (usage.specprefill).
struct SpecPrefillStats {
  bool applied = false;       // the target prefilled only the kept tokens
  int64_t prompt_tokens = 0;  // tokens scored (the suffix after a cached prefix)
  int64_t kept_tokens = 0;    // of those, prefilled by the target
  double scoring_ms = 0;      // draft prefill + lookahead + scoring wall time
  // Its parts when applied (wall time, engine thread; not in the HTTP usage):
  // the draft's chunked prefill, its lookahead decode steps, and scoring plus
  // chunk selection.
  // lookahead_forward_ms: the part of lookahead_ms spent inside the draft's forwards.
  double draft_prefill_ms = 0, lookahead_ms = 0, lookahead_forward_ms = 0, score_ms = 0;
  std::string fallback_reason;  // non-empty when it was attempted and fell back to full prefill
  // Set when applied. Shared: stats are copied on every stats() read.
  std::shared_ptr<const SpecPrefillSelection> selection;
};

// What speculative decoding did for one request, over all choices
// (usage.speculative).
struct SpecDecodeStats {
  bool enabled = false;         // the request speculated (draft present and not turned off)
  int64_t draft_tokens = 0;     // proposed by the draft and verified by the target
  int64_t accepted_tokens = 0;  // of those, accepted
  double acceptance_rate() const {
    return draft_tokens == 0
               ? 0.0
               : static_cast<double>(accepted_tokens) / static_cast<double>(draft_tokens);
  }
};

struct RequestStats {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;     // prompt tokens served from the prefix cache
  int64_t generated_tokens = 0;  // over all choices
  int32_t preemptions = 0;
  // From submit() to the first step that ran the request on the target model
  // (speculative prefill's draft scoring counts as queueing), and to the
  // first generated token; unset until then.
  std::optional<double> queue_ms;
  std::optional<double> ttft_ms;
  SpecPrefillStats specprefill;
  SpecDecodeStats speculative;
};

// The handle an HTTP thread holds for one request.
class RequestStream {
 public:
  virtual ~RequestStream() = default;
  // Waits up to `timeout` for the next event. Returns the event, or nullopt on
  // timeout. After every choice has finished, returns nullopt immediately and
  // done() is true.
  virtual std::optional<RequestEvent> next(std::chrono::milliseconds timeout) = 0;
  virtual bool done() const = 0;
  // Idempotent; the engine frees the request's KV blocks on its next step.
  // Choices not yet finished end with kFinishAbort.
  virtual void cancel() = 0;
  virtual RequestStats stats() const = 0;
};

struct HistogramSnapshot {
  std::vector<double> bounds;   // upper bounds (seconds), ascending; +Inf implied
  std::vector<int64_t> counts;  // cumulative counts per bound, then the +Inf count last
  double sum = 0;
  int64_t count = 0;
};

struct EngineMetrics {
  int64_t n_waiting = 0;
  int64_t n_running = 0;
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_free = 0;    // includes cached blocks nobody holds
  int64_t kv_blocks_cached = 0;  // registered in the prefix cache
  int64_t prefix_cache_queried_tokens = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t requests_finished_total = 0;
  int64_t requests_aborted_total = 0;
  int64_t preemptions_total = 0;
  int64_t steps_total = 0;
  // Engine-thread seconds, to see where a step's time goes: whole steps,
  // the model's forward (the device's grammar masks are made inside it,
  // while the GPU runs), and the grammar's masks and accepts.
  double step_seconds_total = 0;
  double forward_seconds_total = 0;
  double grammar_mask_seconds_total = 0;
  double grammar_accept_seconds_total = 0;
  int64_t specprefill_applied_total = 0;
  int64_t specprefill_fallback_total = 0;
  int64_t specprefill_tokens_saved_total = 0;  // prompt tokens the target did not prefill
  int64_t draft_kv_blocks_total = 0;           // the draft's pool (0 without a draft)
  int64_t draft_kv_blocks_free = 0;
  int64_t specdecode_draft_tokens_total = 0;     // draft tokens verified by the target
  int64_t specdecode_accepted_tokens_total = 0;  // of those, accepted
  int64_t specdecode_verify_total = 0;           // verifications (one per sequence and step)
  // Of those, sampled ones done where the target picks its tokens (on a
  // GPU: no logits row crossed to the host; model/row_verification.h).
  int64_t specdecode_device_verify_total = 0;
  // Accepted draft tokens per verification; bounds are 0, 1, ..., K.
  HistogramSnapshot specdecode_accepted_length;
  HistogramSnapshot time_to_first_token;
  HistogramSnapshot inter_token_latency;
};

// Memory of the loaded model, read when asked (a /metrics scrape), not per
// step: counting the resident pages of a host pool walks its page table.
struct MemoryMetrics {
  int64_t kv_cache_bytes = 0;  // the target's KV pool as reserved
  // Of it, the bytes in RAM now. A host pool is mapped lazily, so this grows
  // as blocks are first used (up to kv_cache_bytes); a device pool is all in.
  int64_t kv_cache_resident_bytes = 0;
  int64_t device_memory_used_bytes = -1;  // on the model's GPU (every process); -1: no GPU
};

class InferenceEngine {
 public:
  virtual ~InferenceEngine() = default;
  // Errors: kErrorInvalidArgument (bad params, prompt + max_tokens over the
  // context, with the numbers), kErrorResourceExhausted (waiting queue full).
  virtual Result<std::shared_ptr<RequestStream>> submit(RequestOptions options) = 0;
  virtual EngineMetrics metrics() const = 0;
  // An engine without a model (a test double) has no memory to report.
  virtual MemoryMetrics memory_metrics() const { return {}; }
  virtual int64_t max_context() const = 0;  // prompt + generated tokens allowed
};

}  // namespace specstack

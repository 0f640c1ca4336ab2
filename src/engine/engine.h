// Engine: the serving engine. One loop thread owns the model, its KV cache
// and the scheduler; HTTP threads submit requests and read their streams
// through thread-safe queues (InferenceEngine). Each step: schedule (decodes
// first, then chunked prefills within the token budget), run the StepPlan,
// sample, and push events to the requests' streams.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine_api.h"
#include "engine/model_instance.h"

namespace specstack {

// Speculative prefill (ALGORITHM.md). The draft must share the target's tokenizer.
struct SpecPrefillOptions {
  ModelInstance* draft = nullptr;  // null: speculative prefill is off
  int64_t threshold = 8192;        // minimum suffix length (after a cached prefix) to apply it
  double keep_pct = 0.2;
  int32_t lookahead = 8;  // captured query steps (last prompt token + N-1 draft tokens)
  int32_t chunk = 32;
  int32_t pool_kernel = 13;
  // While the target has no running sequence (no stream whose next token a
  // longer draft step would delay), the lookahead steps run as one multi-step
  // plan (StepPlan::follow_steps: back to back on the GPU, no host round trip
  // between them). Off by default: on an H200 it did not shorten TTFT
  // (docs/benchmarks.md, session 38). SPECSTACK_LOOKAHEAD_FOLLOW=1 / 0 overrides.
  bool follow_steps = false;
  // Tests only: "scoring" or "draft_kv" makes that stage fail to exercise the fallback.
  std::string inject_fault;
};

// Speculative decoding (engine/specdecode_stage.h): the draft proposes up to
// K tokens per step, the target verifies them in the same flat StepPlan as
// every other sequence, and the output is distributed exactly as the target's.
// The draft must share the target's tokenizer.
struct SpecDecodeOptions {
  ModelInstance* draft = nullptr;  // null: speculative decoding is off
  bool default_on = true;          // requests speculate unless they say false
  int32_t max_draft_tokens = 4;    // K (--spec-tokens)
  bool adaptive = true;            // the policy picks k in 0..K per step; false: always K
  // Sparse draft KV (SPIRe / MagicDec, StreamingLLM mask): with window > 0
  // the draft keeps the blocks holding its first `sink` tokens and the blocks
  // covering its last `window` tokens; blocks in between are freed. Block
  // granular: the draft sees between window and window + block_size - 1
  // recent tokens.
  int32_t draft_window = 0;
  int32_t draft_sink = 0;
  // Benchmarks only (bench spec; serve and generate never set it): when in
  // [0, 1], each draft token is accepted with this probability instead of by
  // comparing distributions, while all the real work (K draft steps, the K+1
  // row verify, rollbacks) still runs. Random weights give meaningless
  // acceptance; this lets a throughput benchmark run at a measured alpha.
  double emulated_acceptance = -1;
  uint64_t emulation_seed = 7;
};

struct EngineOptions {
  int32_t max_num_batched_tokens = 2048;  // token budget of one step
  int32_t max_num_seqs = 256;             // running sequences cap
  int32_t max_queue = 1024;               // waiting requests before submit() says queue full
  bool enable_prefix_caching = true;
  int64_t max_model_len = 0;     // 0: the model's max_position_embeddings
  bool static_batching = false;  // benchmark baseline: admit only when nothing runs
  bool record_steps = false;     // keep a StepRecord per step (benchmarks)
  SpecPrefillOptions specprefill{};
  SpecDecodeOptions specdecode{};
};

// One engine step, for benchmark phase analysis.
struct StepRecord {
  double start_seconds = 0;          // since the engine started
  double seconds = 0;                // draft proposals + schedule + forward + sampling
  double draft_seconds = 0;          // of those, speculative decoding's draft forwards (propose)
  double schedule_seconds = 0;       // the scheduler
  double forward_seconds = 0;        // the target's forward
  double grammar_seconds = 0;        // of forward_seconds, the device's grammar masks (host work)
  int32_t n_draft_tokens = 0;        // tokens the draft forwarded in propose (catch-up included)
  double draft_first_seconds = 0;    // of draft_seconds, its first (catch-up) forward
  double draft_forward_seconds = 0;  // of draft_seconds, all its forwards (the rest: host work)
  double draft_setup_seconds = 0;    // of the host work, before the first draft forward
  int32_t n_draft_admitted = 0;      // sequences the draft admitted (prefix lookup) this step
  int32_t n_tokens = 0;              // tokens in the step's plan
  int32_t n_decode = 0;              // sequences that produced a token
  int32_t n_device_masked = 0;  // of the logit rows, those whose grammar mask the model applied
  int32_t n_running = 0;        // running sequences after the step
};

class EngineCore;  // the loop thread's state (scheduler, sequences)

class Engine final : public InferenceEngine {
 public:
  Engine(ModelInstance& model, const EngineOptions& options);
  ~Engine() override;  // stops the loop; unfinished requests end with kFinishAbort
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Result<std::shared_ptr<RequestStream>> submit(RequestOptions options) override;
  EngineMetrics metrics() const override;
  MemoryMetrics memory_metrics() const override;
  int64_t max_context() const override;
  // Steps recorded so far (empty unless EngineOptions::record_steps).
  std::vector<StepRecord> step_records() const;

 private:
  std::unique_ptr<EngineCore> core_;
};

}  // namespace specstack

// SpecPrefillStage: the draft side of speculative prefill, run as ordinary
// scheduled work on the draft model (its own weights, KV pool and runner).
// Per request: chunked draft prefill of the prompt, then lookahead decode
// steps whose post-RoPE queries are captured (a typed output of the draft's
// forward), then scoring over the draft's paged prompt keys and chunk
// selection. Each step() runs at most one draft forward for all jobs, so the
// engine interleaves it with target steps and running streams never stall.
// Any failure becomes a fallback outcome (full prefill), never a failed request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/request_state.h"
#include "specprefill/attention_capture.h"

namespace specstack {

// What the engine does with a request once its draft work is over.
struct SpecPrefillOutcome {
  Request* request = nullptr;
  bool applied = false;
  // When applied: the target's tokens and their RoPE positions: the cached
  // dense prefix [0, P) followed by the kept suffix tokens at original positions.
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  int32_t prefix_tokens = 0;  // P
  SpecPrefillStats stats;     // fallback_reason set when not applied
  // When applied and the job was asked to keep it: the draft's KV of the
  // whole dense prompt (lookahead slots rolled back), for speculative decoding.
  std::optional<KvSequence> draft_kv;
};

class SpecPrefillStage {
 public:
  // target_sliding_window: the target's window (0 if none): the last W
  // positions are force-kept so its sliding-window layers see recent context.
  SpecPrefillStage(const SpecPrefillOptions& options, int32_t max_batched_tokens,
                   int64_t target_sliding_window);
  ~SpecPrefillStage();

  // Starts draft work for a request whose suffix after `prefix_tokens` cached
  // target tokens is scored with `keep_pct`.
  // keep_draft_kv: hand the draft's prompt KV over in the outcome instead of
  // freeing it (the request goes on to speculative decoding on this draft).
  void add(Request* request, int32_t prefix_tokens, double keep_pct, bool keep_draft_kv = false);
  // One draft forward over the pending jobs; returns the jobs that finished.
  // run_ahead: the lookahead may continue past it within the same call
  // (SpecPrefillOptions::follow_steps), for when no running stream waits on
  // the engine thread.
  std::vector<SpecPrefillOutcome> step(bool run_ahead = false);
  // Drops a request's draft work and frees its draft KV (cancellation).
  void remove(Request* request);
  size_t n_jobs() const { return jobs_.size(); }

 private:
  struct Job;
  // A job's share of one draft step: row s owns the plan's block table s.
  struct Row {
    Job* job;
    int32_t count;  // tokens this step
    bool last_row;  // carries the capture and the logits
  };
  SpecPrefillOutcome finish_job(Job& job);
  SpecPrefillOutcome fallback(Job& job, std::string reason);
  // Sets plan.follow_steps for the rows that carry a capture and appends
  // their slots; returns the count (0: none fit or none are left).
  int32_t add_follow_steps(StepPlan& plan, std::span<const Row> rows);

  SpecPrefillOptions options_;
  int32_t max_batched_tokens_;
  int64_t target_sliding_window_;
  // Scoring runs on the engine thread between forward passes; its own pool
  // parallelises it (the backend's pool is busy only during forwards).
  ThreadPool scoring_pool_;
  std::vector<std::unique_ptr<Job>> jobs_;
};

}  // namespace specstack

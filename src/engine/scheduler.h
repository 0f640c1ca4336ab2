// Scheduler: one rule for every step. Each sequence has tokens whose KV is
// computed (n_computed) and tokens it still needs; a step fills a token
// budget. Running sequences go first in admission order (a decode needs 1
// token, a partly prefilled prompt its next chunk), so a long prompt never
// stalls running streams; waiting sequences are admitted with the budget
// that is left, while KV blocks allow. When a running sequence cannot grow,
// the most recently admitted one is preempted: its blocks are freed and it
// waits at the front of the queue to be recomputed (prefix caching makes the
// recompute cheap). No request is ever dropped.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/request_state.h"
#include "engine/step_plan.h"
#include "kv/kv_manager.h"

namespace specstack {

struct SchedulerOptions {
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  bool enable_prefix_caching = true;
  bool static_batching = false;  // baseline: admit only when nothing is running
};

// What a step computes for one sequence: tokens[first, first + count).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t first = 0;
  int32_t count = 0;
  bool wants_logits = false;  // the chunk reaches the end of the sequence's tokens
  // Rows with logits, the chunk's last ones: 1, or 1 + n_draft when the
  // chunk verifies draft tokens (0 without wants_logits).
  int32_t n_logit_rows = 0;
};

struct ScheduleResult {
  StepPlan plan;
  std::vector<ScheduledChunk> chunks;  // in plan sequence order
  std::vector<Sequence*> preempted;
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  Scheduler(KvManager& kv, const SchedulerOptions& options);

  // A new sequence (no KV yet) joins the back of the waiting queue.
  void add_waiting(Sequence* seq);
  // A sequence that already holds KV (a fork) joins the running set.
  void add_running(Sequence* seq);
  // Drops a sequence wherever it is and frees its KV.
  void remove(Sequence* seq);

  ScheduleResult schedule();
  // After the step ran: advances n_computed and publishes full blocks.
  void commit(const ScheduleResult& result);

  size_t n_waiting() const { return waiting_.size(); }
  size_t n_running() const { return running_.size(); }
  // Running sequences in admission order (speculative decoding drafts for them).
  const std::vector<Sequence*>& running() const { return running_; }
  int64_t n_preemptions() const { return n_preemptions_; }

 private:
  void preempt(Sequence* seq);
  static void add_chunk(ScheduleResult& result, Sequence* seq, int32_t first_slot, int32_t count);

  KvManager& kv_;
  SchedulerOptions options_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // ascending admit_order
  uint64_t next_admit_order_ = 1;
  int64_t n_preemptions_ = 0;
};

}  // namespace specstack

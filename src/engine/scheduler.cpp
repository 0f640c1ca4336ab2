#include "engine/scheduler.h"

#include <algorithm>

namespace specstack {

Scheduler::Scheduler(KvManager& kv, const SchedulerOptions& options) : kv_(kv), options_(options) {}

void Scheduler::add_waiting(Sequence* seq) {
  SS_CHECK(!seq->admitted);
  waiting_.push_back(seq);
}

void Scheduler::add_running(Sequence* seq) {
  SS_CHECK(seq->admitted);
  seq->admit_order = next_admit_order_++;
  running_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  if (seq->admitted) {
    kv_.free(seq->kv);
    seq->admitted = false;
    running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  }
}

void Scheduler::preempt(Sequence* seq) {
  // Recompute later: drop the KV, keep the tokens (prompt + generated so far)
  // but not unverified draft tokens.
  seq->trim_draft(0);
  kv_.free(seq->kv);
  seq->admitted = false;
  seq->n_computed = 0;
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.push_front(seq);
  ++n_preemptions_;
}

void Scheduler::add_chunk(ScheduleResult& result, Sequence* seq, int32_t first_slot,
                          int32_t count) {
  SS_CHECK_EQ(first_slot, seq->n_computed);  // slot i holds tokens[i] (sparse or dense)
  const auto s = static_cast<int32_t>(result.plan.block_tables.size());
  const bool wants_logits = seq->n_computed + count == static_cast<int32_t>(seq->tokens.size());
  // A verification chunk (pending token + draft tokens) wants every row's logits.
  const int32_t n_logit_rows = wants_logits ? 1 + seq->n_draft : 0;
  SS_CHECK_LE(n_logit_rows, count);
  for (int32_t i = 0; i < count; ++i) {
    const int32_t index = seq->n_computed + i;
    result.plan.add_token(seq->tokens[static_cast<size_t>(index)], seq->position_of(index), s,
                          first_slot + i, i >= count - n_logit_rows);
  }
  result.plan.block_tables.push_back(seq->kv.blocks());
  result.plan.seq_n_slots.push_back(seq->kv.n_slots());
  result.chunks.push_back({seq, seq->n_computed, count, wants_logits, n_logit_rows});
}

ScheduleResult Scheduler::schedule() {
  ScheduleResult result;
  int32_t budget = options_.max_num_batched_tokens;
  // Static batching (a benchmark baseline) admits only while the current
  // batch is still forming: nothing running has produced a token yet.
  const bool batch_forming = std::all_of(running_.begin(), running_.end(),
                                         [](const Sequence* s) { return s->n_generated == 0; });

  // 1. Running sequences, oldest first: decodes and continuing prefill chunks.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    // Draft tokens are verified together with the pending token or not at
    // all: trim them to the budget, and drop them rather than preempt anyone
    // for their KV slots.
    if (seq->n_draft > 0) {
      if (seq->n_needed() > budget) seq->trim_draft(budget - 1);
      if (!kv_.can_append(seq->kv, seq->n_needed())) seq->trim_draft(0);
    }
    const int32_t count = std::min(seq->n_needed(), budget);
    if (count <= 0) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!kv_.can_append(seq->kv, count)) {
      Sequence* victim = running_.back();  // most recently admitted
      result.preempted.push_back(victim);
      preempt(victim);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the last running one
    const int32_t first_slot = kv_.append(seq->kv, count);
    add_chunk(result, seq, first_slot, count);
    budget -= count;
    ++i;
  }

  // 2. Admit waiting sequences with the budget and blocks that are left.
  const bool may_admit = !options_.static_batching || batch_forming;
  while (may_admit && budget > 0 && !waiting_.empty() &&
         static_cast<int32_t>(running_.size()) < options_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    CachedPrefix prefix;
    if (options_.enable_prefix_caching) {
      std::span<const int32_t> lookup(seq->tokens);
      if (seq->prefix_lookup_tokens >= 0) {
        // +1: the lookup always leaves the last given token to compute.
        lookup = lookup.first(
            std::min(lookup.size(), static_cast<size_t>(seq->prefix_lookup_tokens) + 1));
      }
      prefix = kv_.find_cached_prefix(lookup, seq->kv.options().extra_key);
    }
    const int32_t count =
        std::min(static_cast<int32_t>(seq->tokens.size()) - prefix.n_tokens, budget);
    if (!kv_.can_allocate(seq->kv, prefix, count)) break;  // wait for blocks to free up
    const int32_t first_slot = kv_.allocate(seq->kv, prefix, count);
    seq->n_computed = prefix.n_tokens;
    seq->admitted = true;
    if (!seq->request->prompt_cached_counted) {
      std::lock_guard<std::mutex> lock(seq->request->stream->mutex);
      seq->request->stream->stats.cached_tokens = prefix.n_tokens;
      seq->request->prompt_cached_counted = true;
    }
    waiting_.pop_front();
    seq->admit_order = next_admit_order_++;
    running_.push_back(seq);
    add_chunk(result, seq, first_slot, count);
    budget -= count;
  }
  return result;
}

void Scheduler::commit(const ScheduleResult& result) {
  for (const ScheduledChunk& chunk : result.chunks) {
    Sequence* seq = chunk.seq;
    seq->n_computed += chunk.count;
    if (options_.enable_prefix_caching) {
      // Draft tokens are not accepted yet: publish only what precedes them.
      const auto n_accepted = static_cast<size_t>(seq->n_computed - seq->n_draft);
      kv_.publish(seq->kv, std::span<const int32_t>(seq->tokens.data(), n_accepted));
    }
  }
}

}  // namespace specstack

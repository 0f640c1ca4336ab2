// The engine loop's view of requests: a Request (one per submit) owns one
// Sequence per choice, and a StreamState shared with the HTTP thread's
// RequestStream. Only the loop thread touches Request and Sequence.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampler.h"
#include "grammar/triggered_matcher.h"
#include "kv/kv_manager.h"

namespace specstack {

using Clock = std::chrono::steady_clock;

// Shared between the loop (producer) and one HTTP thread (consumer).
struct StreamState {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<RequestEvent> events;
  int32_t n_choices = 1;
  int32_t n_finished = 0;  // choices whose finish event was pushed
  RequestStats stats;
  std::atomic<bool> cancel_requested{false};

  void push(RequestEvent event) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (event.finish) ++n_finished;
      events.push_back(std::move(event));
    }
    ready.notify_all();
  }
};

struct Request;

// One choice: the unit the scheduler runs. `tokens` holds every token whose KV
// the sequence needs (prompt + generated); the first n_computed have KV.
struct Sequence {
  explicit Sequence(KvSequence kv_sequence) : kv(std::move(kv_sequence)) {}

  Request* request = nullptr;
  int32_t choice = 0;
  KvSequence kv;
  std::vector<int32_t> tokens;
  // Explicit RoPE positions of tokens[0, positions.size()) — a speculative
  // prefill keeps tokens at their original positions. Empty: position = index.
  // Tokens after them continue at positions.back() + 1.
  std::vector<int32_t> positions;
  // Only tokens[0, prefix_lookup_tokens) may be served from the prefix cache
  // (the dense prefix of a sparse sequence); -1: all of them.
  int32_t prefix_lookup_tokens = -1;
  int32_t n_computed = 0;
  int32_t n_generated = 0;
  // Speculative decoding: the last n_draft entries of `tokens` are draft
  // tokens awaiting verification (never counted in n_generated, never
  // published). The scheduler verifies them with the pending token in one
  // chunk whose every row wants logits.
  int32_t n_draft = 0;
  std::optional<Sampler> sampler;
  // The parser state of a constrained request (engine/grammar_stage.h).
  std::optional<grammar::TriggeredMatcher> grammar;
  // [n_draft] with a grammar: the parser state after draft tokens 0..i, so
  // verification row i + 1 is masked as if they had been emitted.
  std::vector<grammar::TriggeredMatcher> draft_grammar;
  bool admitted = false;  // has KV (running) vs waiting
  bool finished = false;
  uint64_t admit_order = 0;  // larger = admitted later (preempted first)
  Clock::time_point last_token_time;

  int32_t n_needed() const { return static_cast<int32_t>(tokens.size()) - n_computed; }
  // Keeps the first `keep` draft tokens (the budget or the KV pool had no
  // room for the rest, or the sequence was preempted).
  void trim_draft(int32_t keep) {
    if (keep >= n_draft) return;
    tokens.resize(tokens.size() - static_cast<size_t>(n_draft - keep));
    n_draft = keep;
    if (draft_grammar.size() > static_cast<size_t>(keep))
      draft_grammar.erase(draft_grammar.begin() + keep, draft_grammar.end());
  }
  // The parser state before the token at verification row `row` (0: the
  // pending token's row, the sequence's own state); null without a grammar.
  grammar::TriggeredMatcher* grammar_at_row(int32_t row) {
    if (!grammar) return nullptr;
    return row == 0 ? &*grammar : &draft_grammar.at(static_cast<size_t>(row - 1));
  }
  int32_t position_of(int32_t index) const {
    if (positions.empty()) return index;
    const auto n = static_cast<int32_t>(positions.size());
    return index < n ? positions[static_cast<size_t>(index)] : positions.back() + (index - n + 1);
  }
};

struct Request {
  uint64_t id = 0;
  RequestOptions options;
  std::shared_ptr<StreamState> stream;
  std::vector<std::unique_ptr<Sequence>> sequences;  // [n]; forks appear after prefill
  Clock::time_point arrival;
  bool first_token_sent = false;
  bool scheduled = false;  // a step has run it on the target (stats.queue_ms is set)
  bool prompt_cached_counted = false;
};

}  // namespace specstack

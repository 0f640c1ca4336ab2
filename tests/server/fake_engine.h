// A scripted InferenceEngine for the server tests: each submitted request gets
// a FakeStream that replays the events the test scripted (or, when `endless`,
// keeps producing a token every few milliseconds), and records cancel().
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "engine/engine_api.h"

namespace specstack::testing {

class FakeStream : public RequestStream {
 public:
  FakeStream(int32_t n, std::vector<RequestEvent> events, RequestStats stats, bool endless)
      : finished_(static_cast<size_t>(n), false), stats_(stats), endless_(endless) {
    for (auto& event : events) events_.push_back(std::move(event));
  }

  // More events, as a running engine would produce them.
  void push(RequestEvent event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back(std::move(event));
    ready_.notify_all();
  }

  std::optional<RequestEvent> next(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (endless_ && events_.empty() && !cancelled_) {
      lock.unlock();
      std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(2)));
      RequestEvent event;
      event.tokens = {kEndlessToken};
      return event;
    }
    ready_.wait_for(lock, timeout, [&] { return !events_.empty(); });
    if (events_.empty()) return std::nullopt;
    RequestEvent event = std::move(events_.front());
    events_.pop_front();
    if (event.finish) finished_[static_cast<size_t>(event.choice)] = true;
    return event;
  }

  bool done() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!events_.empty()) return false;
    for (bool finished : finished_) {
      if (!finished) return false;
    }
    return true;
  }

  void cancel() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++n_cancel_calls_;
    if (cancelled_) return;
    cancelled_ = true;
    // Like the engine: every choice not finished yet ends with an abort event.
    std::vector<bool> will_finish = finished_;
    for (const RequestEvent& event : events_) {
      if (event.finish) will_finish[static_cast<size_t>(event.choice)] = true;
    }
    for (size_t i = 0; i < will_finish.size(); ++i) {
      if (will_finish[i]) continue;
      RequestEvent event;
      event.choice = static_cast<int32_t>(i);
      event.finish = FinishReason::kFinishAbort;
      events_.push_back(std::move(event));
    }
    ready_.notify_all();
  }

  RequestStats stats() const override { return stats_; }

  int n_cancel_calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return n_cancel_calls_;
  }
  bool cancelled() const { return n_cancel_calls() > 0; }

  static constexpr int32_t kEndlessToken = 300;

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<RequestEvent> events_;
  std::vector<bool> finished_;
  RequestStats stats_;
  bool endless_ = false;
  bool cancelled_ = false;
  int n_cancel_calls_ = 0;
};

// What a speculative prefill engine would report for `options`: applied when
// the request asked for it (kept = ceil(keep_pct * prompt), keep_pct default
// 0.2), nothing otherwise. Lets tests see the request's controls come back in
// usage.specprefill.
inline SpecPrefillStats echo_specprefill(const RequestOptions& options) {
  SpecPrefillStats stats;
  if (!options.specprefill.enabled.value_or(false)) return stats;
  const auto n = static_cast<int64_t>(options.prompt.size());
  stats.applied = true;
  stats.prompt_tokens = n;
  stats.kept_tokens = static_cast<int64_t>(
      std::ceil(options.specprefill.keep_pct.value_or(0.2) * static_cast<double>(n)));
  stats.scoring_ms = 1.5;
  return stats;
}

class FakeEngine : public InferenceEngine {
 public:
  // Events for one submitted request (default: none, the stream never ends).
  std::function<std::vector<RequestEvent>(const RequestOptions&)> script;
  std::optional<Error> submit_error;  // returned by submit() when set
  bool endless = false;               // streams keep producing tokens until cancelled
  int64_t context = 256;
  EngineMetrics metrics_value;
  RequestStats stats;
  bool echo_specprefill_stats = false;  // stats.specprefill = echo_specprefill(request)

  Result<std::shared_ptr<RequestStream>> submit(RequestOptions options) override {
    if (submit_error) return *submit_error;
    std::vector<RequestEvent> events = script ? script(options) : std::vector<RequestEvent>{};
    RequestStats request_stats = stats;
    request_stats.prompt_tokens = static_cast<int64_t>(options.prompt.size());
    if (echo_specprefill_stats) request_stats.specprefill = echo_specprefill(options);
    auto stream =
        std::make_shared<FakeStream>(options.n, std::move(events), request_stats, endless);
    std::lock_guard<std::mutex> lock(mutex_);
    submitted_.push_back(std::move(options));
    streams_.push_back(stream);
    return std::shared_ptr<RequestStream>(stream);
  }
  EngineMetrics metrics() const override { return metrics_value; }
  int64_t max_context() const override { return context; }

  std::vector<RequestOptions> submitted() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return submitted_;
  }
  std::shared_ptr<FakeStream> stream(size_t index) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return index < streams_.size() ? streams_[index] : nullptr;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<RequestOptions> submitted_;
  std::vector<std::shared_ptr<FakeStream>> streams_;
};

// One event per token for choice `choice`, the last one finishing with `finish`.
inline std::vector<RequestEvent> token_events(int32_t choice, const std::vector<int32_t>& tokens,
                                              FinishReason finish) {
  std::vector<RequestEvent> events;
  for (size_t i = 0; i < tokens.size(); ++i) {
    RequestEvent event;
    event.choice = choice;
    event.tokens = {tokens[i]};
    if (i + 1 == tokens.size()) event.finish = finish;
    events.push_back(std::move(event));
  }
  if (tokens.empty()) {
    RequestEvent event;
    event.choice = choice;
    event.finish = finish;
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace specstack::testing

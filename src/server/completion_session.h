// One OpenAI request in flight: reads the engine's RequestStream, turns each
// choice's tokens into text (StreamDecoder, then StopStringMatcher) and
// produces either SSE chunks or, at the end, the whole response.
//
// Stop strings and n > 1: RequestStream::cancel() ends every choice, so a
// choice that meets a stop string is finished here ("stop") and the engine's
// later tokens for it are ignored; the request is cancelled in the engine as
// soon as every choice is finished here. With n == 1 that is immediately.
//
// Ending early: a request whose deadline passes, or that the server's drain
// cuts (request_shutdown()), is cancelled in the engine at the next poll and
// its unfinished choices end with finish_reason "timeout" / "shutdown"; a
// stream then carries an error event (end_error()) before [DONE].
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampler.h"
#include "server/errors.h"
#include "server/openai_response.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

struct SessionOptions {
  ResponseHeader header;
  int32_t n = 1;
  int32_t top_logprobs = -1;  // -1: no logprobs
  bool stream = false;        // SSE chunks (poll_stream) or one response (poll)
  bool include_usage = false;
  bool skip_special_tokens = true;
  std::vector<std::string> stop_strings;
  int64_t prompt_tokens = 0;
  bool specprefill_usage = false;  // usage carries the engine's SpecPrefillStats
  bool specdecode_usage = false;   // usage carries the engine's SpecDecodeStats
  // usage.specprefill carries the selection (with specprefill_usage); `prompt`
  // is then the prompt's ids, for the selection's token texts.
  bool specprefill_selection = false;
  std::vector<int32_t> prompt;
  // The request ends with kFinishTimeout at this time; timeout_seconds is the
  // budget it came from (for the error message). Unset: no deadline.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  double timeout_seconds = 0;
  // Chat with tools: each choice's output is parsed for calls in this format
  // (message.tool_calls / delta.tool_calls, finish_reason "tool_calls").
  std::optional<ToolCallFormat> tool_calls;
  // usage.timing.total_ms counts from here. Set before the engine submit, so
  // the total is never below the engine's queue_ms and ttft_ms, which count
  // from inside submit.
  std::chrono::steady_clock::time_point submitted_at = std::chrono::steady_clock::now();
};

SessionOptions session_options_for(const OpenAiRequest& request, ResponseHeader header);

class CompletionSession {
 public:
  // The tokenizer must outlive the session.
  CompletionSession(const Tokenizer& tokenizer, SessionOptions options,
                    std::shared_ptr<RequestStream> stream);
  ~CompletionSession();  // cancels the engine request if it is still running
  CompletionSession(const CompletionSession&) = delete;
  CompletionSession& operator=(const CompletionSession&) = delete;

  // Waits up to `timeout` for engine events and applies every event ready.
  // Streaming: returns the SSE text to send now (may be empty); the text that
  // follows the last choice's end holds the usage chunk (if asked) and
  // "data: [DONE]".
  std::string poll_stream(std::chrono::milliseconds timeout);
  // Non-streaming: the same, keeping the text for response().
  void poll(std::chrono::milliseconds timeout);

  // Every choice has ended; when streaming, "data: [DONE]" was returned too.
  bool finished() const;
  OrderedJson response() const;  // the non-streaming body; valid once finished()
  UsageCounts usage() const;
  void cancel();  // idempotent

  // Thread-safe: asks the thread that polls to end the request at its next
  // poll with kFinishShutdown (the poller cancels it in the engine).
  void request_shutdown();
  // Why the server ended the request early (kFinishTimeout, kFinishShutdown),
  // or nullopt when it ended on its own.
  std::optional<FinishReason> ended_early() const { return ended_early_; }
  // The OpenAI error for an early end: 504 "timeout" or 503
  // "server_shutting_down" (with Retry-After). Valid once ended_early().
  ApiError end_error() const;

 private:
  struct Choice;
  // Applies one event; returns the choice's new output (text, logprobs, finish).
  ChoiceOutput apply(const RequestEvent& event);
  // Chat with tools: passes out.text through the choice's ToolCallStream
  // (content and call deltas into `out`) and, once the choice has finished,
  // adds the choice's calls to `out`.
  void settle_tool_calls(Choice& choice, ChoiceOutput& out);
  void append_logprobs(Choice& choice, const TokenLogprob& logprob, ChoiceOutput& out) const;
  bool all_choices_finished() const;
  bool all_engine_finished() const;
  // Reads what the engine has ready: the first wait up to timeout, then
  // without waiting. Returns the choices' outputs in arrival order.
  std::vector<ChoiceOutput> drain(std::chrono::milliseconds timeout);
  // The early end due now (deadline passed, shutdown asked), if any.
  std::optional<FinishReason> due_end() const;
  // How long the next wait for events may be: `timeout`, cut at the deadline.
  std::chrono::milliseconds wait_budget(std::chrono::milliseconds timeout) const;
  // Cancels the request and ends every unfinished choice with `reason`;
  // returns those choices' last outputs (their flushed text and finish).
  std::vector<ChoiceOutput> end_early(FinishReason reason);
  // Ends the unfinished choice `index` with `reason`: its held-back text (an
  // incomplete character, a possible stop string's start) is flushed into the
  // returned output, since it was generated before the end.
  ChoiceOutput finish_unfinished(size_t index, FinishReason reason);
  void note_end();  // every choice has finished: the time usage.timing.total_ms ends at

  const Tokenizer* tokenizer_;
  SessionOptions options_;
  std::shared_ptr<RequestStream> stream_;
  std::vector<std::unique_ptr<Choice>> choices_;
  bool streaming_started_ = false;
  bool stream_closed_ = false;  // [DONE] produced
  std::atomic<bool> shutdown_requested_{false};
  std::optional<FinishReason> ended_early_;
  std::optional<std::chrono::steady_clock::time_point> ended_at_;  // every choice finished
};

}  // namespace specstack

// One OpenAI request in flight: reads the engine's RequestStream, turns each
// choice's tokens into text (StreamDecoder, then StopStringMatcher) and
// produces either SSE chunks or, at the end, the whole response.
//
// Stop strings and n > 1: RequestStream::cancel() ends every choice, so a
// choice that meets a stop string is finished here ("stop") and the engine's
// later tokens for it are ignored; the request is cancelled in the engine as
// soon as every choice is finished here. With n == 1 that is immediately.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_api.h"
#include "engine/sampler.h"
#include "server/openai_response.h"
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

 private:
  struct Choice;
  // Applies one event; returns the choice's new output (text, logprobs, finish).
  ChoiceOutput apply(const RequestEvent& event);
  void append_logprobs(Choice& choice, const TokenLogprob& logprob, ChoiceOutput& out) const;
  bool all_choices_finished() const;
  bool all_engine_finished() const;
  // Reads what the engine has ready: the first wait up to timeout, then
  // without waiting. Returns the choices' outputs in arrival order.
  std::vector<ChoiceOutput> drain(std::chrono::milliseconds timeout);

  const Tokenizer* tokenizer_;
  SessionOptions options_;
  std::shared_ptr<RequestStream> stream_;
  std::vector<std::unique_ptr<Choice>> choices_;
  bool streaming_started_ = false;
  bool stream_closed_ = false;  // [DONE] produced
};

}  // namespace specstack

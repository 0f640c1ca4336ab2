#include "server/completion_session.h"

#include <algorithm>

#include "base/check.h"
#include "server/specprefill_selection.h"

namespace specstack {

struct CompletionSession::Choice {
  Choice(const Tokenizer& tokenizer, const SessionOptions& options)
      : decoder(tokenizer, options.skip_special_tokens), stops(options.stop_strings) {
    if (options.tool_calls) tools = std::make_unique<ToolCallStream>(*options.tool_calls);
  }

  StreamDecoder decoder;
  StopStringMatcher stops;
  std::string text;                        // everything emitted so far
  std::vector<TokenLogprobText> logprobs;  // every token consumed so far
  int64_t logprob_text_offset = 0;         // completions text_offset of the next token
  int64_t n_tokens = 0;                    // consumed tokens (up to the stop string)
  std::optional<FinishReason> finish;      // as the client sees it
  bool engine_finished = false;            // the engine sent this choice's last event
  std::unique_ptr<ToolCallStream> tools;   // chat with tools: splits content and calls
  std::vector<ToolCall> tool_calls;        // complete when the choice ended
};

SessionOptions session_options_for(const OpenAiRequest& request, ResponseHeader header) {
  SessionOptions options;
  options.header = std::move(header);
  options.n = request.options.n;
  options.top_logprobs = request.options.top_logprobs;
  options.stream = request.stream;
  options.include_usage = request.include_usage;
  options.skip_special_tokens = request.skip_special_tokens;
  options.stop_strings = request.options.params.stop_strings;
  options.prompt_tokens = static_cast<int64_t>(request.options.prompt.size());
  options.tool_calls = request.tool_calls;
  return options;
}

CompletionSession::CompletionSession(const Tokenizer& tokenizer, SessionOptions options,
                                     std::shared_ptr<RequestStream> stream)
    : tokenizer_(&tokenizer), options_(std::move(options)), stream_(std::move(stream)) {
  SS_CHECK(stream_ != nullptr);
  SS_CHECK_GE(options_.n, 1);
  for (int32_t i = 0; i < options_.n; ++i) {
    choices_.push_back(std::make_unique<Choice>(*tokenizer_, options_));
  }
}

CompletionSession::~CompletionSession() {
  cancel();
}

void CompletionSession::request_shutdown() {
  shutdown_requested_ = true;
}

std::optional<FinishReason> CompletionSession::due_end() const {
  if (shutdown_requested_) return FinishReason::kFinishShutdown;
  if (options_.deadline && std::chrono::steady_clock::now() >= *options_.deadline) {
    return FinishReason::kFinishTimeout;
  }
  return std::nullopt;
}

std::chrono::milliseconds CompletionSession::wait_budget(std::chrono::milliseconds timeout) const {
  if (!options_.deadline) return timeout;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*options_.deadline -
                                                                 std::chrono::steady_clock::now());
  return std::clamp(left, std::chrono::milliseconds(0), timeout);
}

std::vector<ChoiceOutput> CompletionSession::end_early(FinishReason reason) {
  ended_early_ = reason;
  cancel();  // the engine frees the request's KV blocks on its next step
  std::vector<ChoiceOutput> outputs;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (!choices_[i]->finish) outputs.push_back(finish_unfinished(i, reason));
  }
  return outputs;
}

ChoiceOutput CompletionSession::finish_unfinished(size_t index, FinishReason reason) {
  Choice& choice = *choices_[index];
  ChoiceOutput out;
  out.index = static_cast<int32_t>(index);
  out.text = choice.stops.push(choice.decoder.flush()) + choice.stops.flush();
  choice.finish = reason;
  out.finish = reason;
  settle_tool_calls(choice, out);
  choice.text += out.text;
  return out;
}

ApiError CompletionSession::end_error() const {
  int64_t generated = 0;
  for (const auto& choice : choices_) generated += choice->n_tokens;
  if (ended_early_ == FinishReason::kFinishShutdown) {
    return shutting_down_error(fmt::format(
        "The server is shutting down and cancelled this request after {} generated tokens; "
        "retry it",
        generated));
  }
  return request_timeout_error(fmt::format(
      "The request did not finish within its timeout of {} s ({} tokens generated); raise "
      "'timeout' or the server's --request-timeout",
      options_.timeout_seconds, generated));
}

void CompletionSession::cancel() {
  // Cancelling a finished request is a no-op in the engine; skipping it keeps
  // the engine's abort counter meaningful.
  if (!all_engine_finished() && !stream_->done()) stream_->cancel();
}

bool CompletionSession::all_choices_finished() const {
  for (const auto& choice : choices_) {
    if (!choice->finish) return false;
  }
  return true;
}

bool CompletionSession::all_engine_finished() const {
  for (const auto& choice : choices_) {
    if (!choice->engine_finished) return false;
  }
  return true;
}

bool CompletionSession::finished() const {
  return all_choices_finished() && (!options_.stream || stream_closed_);
}

void CompletionSession::append_logprobs(Choice& choice, const TokenLogprob& logprob,
                                        ChoiceOutput& out) const {
  TokenLogprobText item;
  item.token = tokenizer_->decode(std::vector<int32_t>{logprob.token});
  item.logprob = logprob.logprob;
  const size_t n_top = std::min(logprob.top.size(), static_cast<size_t>(options_.top_logprobs));
  for (size_t i = 0; i < n_top; ++i) {
    item.top.emplace_back(tokenizer_->decode(std::vector<int32_t>{logprob.top[i].first}),
                          logprob.top[i].second);
  }
  if (out.logprobs.empty()) out.text_offset = choice.logprob_text_offset;
  choice.logprob_text_offset += static_cast<int64_t>(item.token.size());
  out.logprobs.push_back(item);
  choice.logprobs.push_back(std::move(item));
}

void CompletionSession::settle_tool_calls(Choice& choice, ChoiceOutput& out) {
  if (!choice.tools) return;
  ToolStreamOutput pushed = choice.tools->push(out.text);
  out.text = std::move(pushed.content);
  out.tool_call_deltas = std::move(pushed.calls);
  if (!choice.finish) return;
  ToolStreamOutput last = choice.tools->finish();
  out.text += last.content;
  for (ToolCallDelta& call : last.calls) out.tool_call_deltas.push_back(std::move(call));
  choice.tool_calls = choice.tools->calls();
  out.tool_calls = choice.tool_calls;
}

ChoiceOutput CompletionSession::apply(const RequestEvent& event) {
  SS_CHECK_GE(event.choice, 0);
  SS_CHECK_LT(event.choice, options_.n);
  Choice& choice = *choices_[static_cast<size_t>(event.choice)];
  ChoiceOutput out;
  out.index = event.choice;
  const bool finished_before = choice.finish.has_value();
  if (event.finish) choice.engine_finished = true;
  if (finished_before) return out;  // tokens after a stop string: nothing new to say

  const bool want_logprobs = options_.top_logprobs >= 0;
  for (size_t i = 0; i < event.tokens.size(); ++i) {
    ++choice.n_tokens;
    if (want_logprobs && i < event.logprobs.size()) {
      append_logprobs(choice, event.logprobs[i], out);
    }
    out.text += choice.stops.push(choice.decoder.push(event.tokens[i]));
    if (choice.stops.stopped()) {
      choice.finish = FinishReason::kFinishStop;
      break;
    }
  }
  if (!choice.finish && event.finish) {
    out.text += choice.stops.push(choice.decoder.flush());
    out.text += choice.stops.flush();
    // A stop string completed by the flushed text still means "stop".
    choice.finish = choice.stops.stopped() ? FinishReason::kFinishStop : *event.finish;
  }
  out.finish = choice.finish;
  settle_tool_calls(choice, out);
  choice.text += out.text;
  if (choice.finish && all_choices_finished() && !all_engine_finished()) cancel();
  return out;
}

std::vector<ChoiceOutput> CompletionSession::drain(std::chrono::milliseconds timeout) {
  std::vector<ChoiceOutput> outputs;
  // Bounded so a fast engine cannot keep one writer from ever returning.
  constexpr int kMaxEventsPerPoll = 256;
  std::optional<RequestEvent> event = stream_->next(timeout);
  for (int i = 0; event && i < kMaxEventsPerPoll; ++i) {
    outputs.push_back(apply(*event));
    if (i + 1 < kMaxEventsPerPoll) event = stream_->next(std::chrono::milliseconds(0));
  }
  if (stream_->done()) {
    // Every choice must have seen its finish event by now; a choice that did
    // not (an engine that ended early) still ends instead of hanging.
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (choices_[i]->finish) continue;
      outputs.push_back(finish_unfinished(i, FinishReason::kFinishAbort));
      choices_[i]->engine_finished = true;
    }
  }
  return outputs;
}

std::string CompletionSession::poll_stream(std::chrono::milliseconds timeout) {
  if (stream_closed_) return {};
  const bool want_logprobs = options_.top_logprobs >= 0;
  std::string out;
  if (!streaming_started_) {
    streaming_started_ = true;
    if (options_.header.endpoint == ApiEndpoint::kApiChatCompletions) {
      // OpenAI opens each chat choice with a role-only delta.
      for (int32_t i = 0; i < options_.n; ++i) {
        ChoiceOutput opening;
        opening.index = i;
        opening.first_chunk = true;
        out += sse_event(stream_chunk(options_.header, opening, false, options_.include_usage));
      }
    }
  }
  // Tokens that arrived before an early end still go out, ahead of it.
  std::optional<FinishReason> due = due_end();
  const bool wait = out.empty() && !due;
  std::vector<ChoiceOutput> outputs =
      drain(wait ? wait_budget(timeout) : std::chrono::milliseconds(0));
  if (!due) due = due_end();
  const bool cut = due && !all_choices_finished();
  if (cut) {
    for (ChoiceOutput& last : end_early(*due)) outputs.push_back(std::move(last));
  }
  for (const ChoiceOutput& delta : outputs) {
    // Events of a choice that already ended come back empty, without finish.
    if (delta.text.empty() && delta.logprobs.empty() && !delta.finish &&
        delta.tool_call_deltas.empty()) {
      continue;
    }
    if (delta.tool_call_deltas.empty() && delta.tool_calls.empty()) {
      out += sse_event(stream_chunk(options_.header, delta, want_logprobs, options_.include_usage));
      continue;
    }
    // Text first, then the call deltas as they came, then the finish on a
    // chunk of its own.
    ChoiceOutput head = delta;
    head.finish.reset();
    head.tool_calls.clear();
    head.tool_call_deltas.clear();
    if (!head.text.empty() || !head.logprobs.empty()) {
      out += sse_event(stream_chunk(options_.header, head, want_logprobs, options_.include_usage));
    }
    for (const ToolCallDelta& call : delta.tool_call_deltas) {
      out += sse_event(
          tool_call_delta_chunk(options_.header, delta.index, call, options_.include_usage));
    }
    if (delta.finish) {
      ChoiceOutput tail;
      tail.index = delta.index;
      tail.finish = delta.finish;
      tail.tool_calls = delta.tool_calls;  // for finish_reason "tool_calls"
      out += sse_event(stream_chunk(options_.header, tail, false, options_.include_usage));
    }
  }
  if (all_choices_finished()) {
    note_end();
    if (options_.include_usage) out += sse_event(usage_chunk(options_.header, usage()));
    // An SSE error event (vLLM reports errors mid-stream the same way): the
    // openai clients raise it as an APIError instead of returning a silently
    // short stream.
    if (cut) out += "data: " + error_body(end_error()) + "\n\n";
    out += kSseDone;
    stream_closed_ = true;
  }
  return out;
}

void CompletionSession::poll(std::chrono::milliseconds timeout) {
  std::optional<FinishReason> due = due_end();
  drain(due ? std::chrono::milliseconds(0) : wait_budget(timeout));
  if (!due) due = due_end();
  if (due && !all_choices_finished()) end_early(*due);
  if (all_choices_finished()) note_end();
}

void CompletionSession::note_end() {
  if (!ended_at_) ended_at_ = std::chrono::steady_clock::now();
}

UsageCounts CompletionSession::usage() const {
  UsageCounts usage;
  usage.prompt_tokens = options_.prompt_tokens;
  for (const auto& choice : choices_) usage.completion_tokens += choice->n_tokens;
  const RequestStats stats = stream_->stats();
  usage.cached_tokens = stats.cached_tokens;
  usage.timing.queue_ms = stats.queue_ms;
  usage.timing.ttft_ms = stats.ttft_ms;
  usage.timing.total_ms =
      std::chrono::duration<double, std::milli>(
          ended_at_.value_or(std::chrono::steady_clock::now()) - options_.submitted_at)
          .count();
  if (options_.specprefill_usage) usage.specprefill = stats.specprefill;
  if (options_.specprefill_usage && options_.specprefill_selection) {
    usage.specprefill_selection =
        specprefill_selection_json(stats.specprefill, options_.prompt, *tokenizer_);
  }
  if (options_.specdecode_usage) usage.speculative = stats.speculative;
  return usage;
}

OrderedJson CompletionSession::response() const {
  std::vector<ChoiceOutput> outputs;
  for (size_t i = 0; i < choices_.size(); ++i) {
    ChoiceOutput out;
    out.index = static_cast<int32_t>(i);
    out.text = choices_[i]->text;
    out.logprobs = choices_[i]->logprobs;
    out.finish = choices_[i]->finish;
    out.tool_calls = choices_[i]->tool_calls;
    outputs.push_back(std::move(out));
  }
  return completion_response(options_.header, outputs, usage(), options_.top_logprobs >= 0);
}

}  // namespace specstack

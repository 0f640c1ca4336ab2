// JSON of OpenAI responses: whole completions / chat completions, the SSE
// chunks of streamed ones and their usage. Pure functions of already
// detokenized text, so the shapes are tested without an engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/engine_api.h"
#include "server/openai_request.h"
#include "server/request_fields.h"
#include "server/tool_call_stream.h"
#include "server/tool_calls.h"

namespace specstack {

struct ResponseHeader {
  ApiEndpoint endpoint = ApiEndpoint::kApiCompletions;
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// One generated token's log probability with its text instead of its id.
struct TokenLogprobText {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // best alternatives, descending
};

// usage.timing, in milliseconds; each null until it happened (a request cut
// before its first token has no ttft_ms).
struct RequestTiming {
  std::optional<double> queue_ms;  // submit -> first step on the target model
  std::optional<double> ttft_ms;   // submit -> first generated token
  std::optional<double> total_ms;  // submit -> the request's end, as the server saw it
};

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Set only when the server has a draft (speculative prefill configured):
  // usage.specprefill is absent otherwise, so plain servers keep OpenAI's shape.
  std::optional<SpecPrefillStats> specprefill{};
  // usage.specprefill.selection, set only when the request asked for it
  // (specprefill_selection.h); beside specprefill, never without it.
  std::optional<OrderedJson> specprefill_selection{};
  // Set only when the server runs speculative decoding (--spec-decode), for
  // the same reason: usage.speculative is absent otherwise.
  std::optional<SpecDecodeStats> speculative{};
  RequestTiming timing{};
};

// What one choice has to say: its whole output (non-streaming) or what is new
// since the last chunk (streaming).
struct ChoiceOutput {
  int32_t index = 0;
  bool first_chunk = false;  // streamed chat: the delta also carries role "assistant"
  std::string text;
  std::vector<TokenLogprobText> logprobs;
  int64_t text_offset = 0;  // completions logprobs: offset of this output in the choice's text
  std::optional<FinishReason> finish;
  // Chat with tools: the calls of the choice (whole response: all of them,
  // message.content then null unless text came before them; streamed: set
  // on the finishing output, for its finish_reason). A choice that stopped
  // with calls finishes with "tool_calls".
  std::vector<ToolCall> tool_calls;
  // Streamed chat with tools: the call deltas this output carries (after
  // `text`), each sent by tool_call_delta_chunk().
  std::vector<ToolCallDelta> tool_call_deltas;
};

// "stop", "length"; "timeout" when the request's deadline cut it, "shutdown"
// when the server's drain timeout did; "abort" only when the engine ended the
// request itself (e.g. destroyed) while a client was still waiting.
const char* finish_reason_name(FinishReason reason);

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:
// {cached_tokens}} plus, when usage.specprefill is set, specprefill: {applied,
// prompt_tokens, kept_tokens, scoring_ms, fallback_reason (string or null),
// selection (only when specprefill_selection is set)},
// and when usage.speculative is set, speculative: {draft_tokens,
// accepted_tokens, acceptance_rate} (acceptance_rate 0 when nothing was drafted),
// and always, last, timing: {queue_ms, ttft_ms, total_ms} (null until known).
OrderedJson usage_json(const UsageCounts& usage);

// The `logprobs` of one choice: completions {tokens, token_logprobs,
// top_logprobs, text_offset}, chat {content: [{token, logprob, bytes,
// top_logprobs}]}. Non-finite log probabilities become -9999.0.
OrderedJson logprobs_json(ApiEndpoint endpoint, const std::vector<TokenLogprobText>& logprobs,
                          int64_t text_offset);

// A whole (non-streaming) response. want_logprobs: the request asked for them.
OrderedJson completion_response(const ResponseHeader& header,
                                const std::vector<ChoiceOutput>& choices, const UsageCounts& usage,
                                bool want_logprobs);

// One SSE chunk for one choice. with_null_usage: stream_options.include_usage
// was set, so every chunk but the last carries "usage": null.
OrderedJson stream_chunk(const ResponseHeader& header, const ChoiceOutput& delta,
                         bool want_logprobs, bool with_null_usage);

// The chunk of one streamed tool-call delta of choice `index`, as OpenAI
// sends them: the opening {tool_calls: [{index, id, type: "function",
// function: {name, arguments: ""}}]}, then {tool_calls: [{index, function:
// {arguments: <fragment>}}]} per fragment.
OrderedJson tool_call_delta_chunk(const ResponseHeader& header, int32_t index,
                                  const ToolCallDelta& call, bool with_null_usage);

// The final usage chunk of a stream with include_usage: no choices.
OrderedJson usage_chunk(const ResponseHeader& header, const UsageCounts& usage);

// "data: <json>\n\n". Invalid UTF-8 (never expected) is replaced, not thrown.
std::string sse_event(const OrderedJson& chunk);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The compact JSON text of a response body, replacing invalid UTF-8.
std::string json_text(const OrderedJson& value);

}  // namespace specstack

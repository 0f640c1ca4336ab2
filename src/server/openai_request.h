// POST /v1/completions and /v1/chat/completions bodies parsed into native
// types: the prompt as token ids (after the chat template and tokenization),
// validated sampling options and the response flags. Everything the engine
// would reject is rejected here first, with a message that names the field.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "chat/chat_template.h"
#include "engine/engine_api.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

enum class ApiEndpoint { kApiCompletions, kApiChatCompletions };

// How the strings of a chat request (messages, tools) are tokenized.
enum class ChatContentTokens {
  // Plain text: "<|im_start|>" in a message is BPE'd as text, so a request
  // cannot forge the template's turns (the template's own markup stays special).
  kPlainText,
  // The old behaviour (serve --chat-content-special-tokens): the rendered
  // prompt is tokenized as a whole, so request text can produce control tokens.
  kSpecial,
};

class GrammarCache;  // server/structured_output.h

// What parsing needs to know about the model being served.
struct ServedModel {
  const Tokenizer* tokenizer = nullptr;         // required
  const ChatTemplate* chat_template = nullptr;  // null: chat requests fail with chat_template_error
  std::string chat_template_error;              // why there is no chat template
  std::string name;                             // the only accepted `model`
  int64_t max_context = 0;                      // prompt + completion tokens; <= 0: unchecked
  int64_t vocab_size = 0;                       // valid prompt ids are [0, vocab_size)
  ChatContentTokens chat_content = ChatContentTokens::kPlainText;
  // Compiles response_format / grammar constraints; null: such requests get a 400.
  GrammarCache* grammars = nullptr;
  // The chat template's tool-call format (server/tool_calls.h); unset: chat
  // requests with tools get a 400 saying tool_format_error.
  std::optional<ToolCallFormat> tool_format;
  std::string tool_format_error = "this model's chat template has no tool-call format";
};

struct OpenAiRequest {
  ApiEndpoint endpoint = ApiEndpoint::kApiCompletions;
  RequestOptions options;  // prompt ids, sampling params (incl. stop strings), n, top_logprobs
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool skip_special_tokens = true;  // in the returned text (vLLM's default)
  // `timeout` (seconds, top level or extra_body): the request's own deadline,
  // in place of the server's --request-timeout. Unset: the server's.
  std::optional<double> timeout_seconds;
  // `specprefill_return_selection` (top level or extra_body): usage.specprefill
  // gains `selection`, the chunks speculative prefill kept (specprefill_selection.h).
  // Accepted and ignored on a server without a draft, like the other
  // speculative controls: there is nothing to select, and usage.specprefill
  // (where it would go) is absent there too. A stream that asks for it gets
  // the usage chunk even without stream_options.include_usage.
  bool specprefill_return_selection = false;
  // Chat with tools offered (tool_choice not "none"): the output is parsed
  // for calls in this format.
  std::optional<ToolCallFormat> tool_calls;
};

// Limits on what one request may ask for.
inline constexpr int64_t kMaxChoices = 16;            // n (the engine forks at most 16)
inline constexpr int64_t kMaxCompletionLogprobs = 5;  // completions `logprobs`
inline constexpr int64_t kMaxChatTopLogprobs = 20;    // chat `top_logprobs`
inline constexpr size_t kMaxStopStrings = 16;         // `stop` (SamplingParams::validate's cap)
inline constexpr double kMaxTimeoutSeconds = 604800;  // `timeout`: a week, far past any real use

// Errors: kErrorInvalidArgument (400) for malformed JSON, invalid UTF-8, wrong
// types, out-of-range values and prompt + max_tokens over the context;
// kErrorNotFound (404) for a `model` other than the served one. When the
// error is about response_format, grammar, tools, tool_choice or
// parallel_tool_calls, *error_param names that field (OpenAI's error
// "param"); other errors leave it alone.
Result<OpenAiRequest> parse_openai_request(ApiEndpoint endpoint, std::string_view body,
                                           const ServedModel& model,
                                           std::string* error_param = nullptr);

}  // namespace specstack

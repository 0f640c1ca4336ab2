#include "server/openai_request.h"

#include <limits>

#include "server/chat_prompt.h"
#include "server/request_fields.h"
#include "server/structured_output.h"
#include "server/tool_request.h"
#include "specprefill/policy.h"

namespace specstack {
namespace {

// vLLM's extra_body: clients put non-OpenAI fields there; they count as
// top-level fields (and win over a top-level field of the same name).
Status merge_extra_body(OrderedJson& body) {
  SS_ASSIGN_OR_RETURN(const OrderedJson* extra, get_object(body, "extra_body"));
  if (extra == nullptr) return Status::ok_status();
  OrderedJson fields = *extra;
  body.erase("extra_body");
  for (auto& [key, value] : fields.items()) body[key] = std::move(value);
  return Status::ok_status();
}

Status check_model(const OrderedJson& body, const ServedModel& model) {
  SS_ASSIGN_OR_RETURN(std::optional<std::string> name, get_string(body, "model"));
  // An absent model means the served one, as in vLLM.
  if (name && *name != model.name) {
    return make_error(
        fmt::format("The model '{}' does not exist; this server serves '{}'", *name, model.name),
        ErrorCode::kErrorNotFound);
  }
  return Status::ok_status();
}

// Fields that change what a response means; silently ignoring them would
// return something the client did not ask for.
Status reject_unsupported(const OrderedJson& body) {
  SS_ASSIGN_OR_RETURN(std::optional<bool> echo, get_bool(body, "echo"));
  if (echo.value_or(false)) return make_error("'echo' is not supported");
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> best_of, get_integer(body, "best_of"));
  if (best_of.value_or(1) != 1) return make_error("'best_of' other than 1 is not supported");
  SS_ASSIGN_OR_RETURN(std::optional<std::string> suffix, get_string(body, "suffix"));
  if (suffix && !suffix->empty()) return make_error("'suffix' is not supported");
  SS_ASSIGN_OR_RETURN(const OrderedJson* logit_bias, get_object(body, "logit_bias"));
  if (logit_bias != nullptr && !logit_bias->empty()) {
    return make_error("'logit_bias' is not supported");
  }
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> min_tokens, get_integer(body, "min_tokens"));
  if (min_tokens.value_or(0) != 0) return make_error("'min_tokens' is not supported");
  return Status::ok_status();
}

// `prompt`: a string, an array of token ids, or a one-element batch of either.
Result<std::vector<int32_t>> completion_prompt_ids(const OrderedJson& body,
                                                   const ServedModel& model) {
  const auto found = body.find("prompt");
  if (found == body.end() || found->is_null()) return make_error("'prompt' is required");
  const OrderedJson* prompt = &*found;
  if (prompt->is_array() && !prompt->empty() &&
      ((*prompt)[0].is_string() || (*prompt)[0].is_array())) {
    if (prompt->size() > 1) {
      return make_error("batched prompts are not supported: send one prompt per request");
    }
    prompt = &(*prompt)[0];
  }
  if (prompt->is_string()) {
    return model.tokenizer->encode(prompt->get_ref<const std::string&>(),
                                   /*add_special_tokens=*/true);
  }
  if (!prompt->is_array()) {
    return errorf("'prompt' must be a string or an array of token ids, got {}",
                  json_type_name(*prompt));
  }
  std::vector<int32_t> ids;
  ids.reserve(prompt->size());
  for (size_t i = 0; i < prompt->size(); ++i) {
    const OrderedJson& item = (*prompt)[i];
    if (!item.is_number_integer()) {  // unsigned integers are integers too
      return errorf("'prompt[{}]' must be a token id (an integer), got {}", i,
                    json_type_name(item));
    }
    const bool in_range = item.is_number_unsigned()
                              ? item.get<uint64_t>() < static_cast<uint64_t>(model.vocab_size)
                              : item.get<int64_t>() >= 0 && item.get<int64_t>() < model.vocab_size;
    if (!in_range) {
      return errorf("'prompt[{}]': token id {} is out of range [0, {})", i, item.dump(),
                    model.vocab_size);
    }
    ids.push_back(static_cast<int32_t>(item.get<int64_t>()));
  }
  return ids;
}

Status parse_sampling(const OrderedJson& body, SamplingParams& params) {
  SS_ASSIGN_OR_RETURN(std::optional<double> temperature, get_number(body, "temperature"));
  SS_ASSIGN_OR_RETURN(std::optional<double> top_p, get_number(body, "top_p"));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> top_k, get_integer(body, "top_k"));
  SS_ASSIGN_OR_RETURN(std::optional<double> min_p, get_number(body, "min_p"));
  SS_ASSIGN_OR_RETURN(std::optional<double> presence, get_number(body, "presence_penalty"));
  SS_ASSIGN_OR_RETURN(std::optional<double> frequency, get_number(body, "frequency_penalty"));
  SS_ASSIGN_OR_RETURN(std::optional<double> repetition, get_number(body, "repetition_penalty"));
  SS_ASSIGN_OR_RETURN(std::optional<uint64_t> seed, get_seed(body, "seed"));
  SS_ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, get_bool(body, "ignore_eos"));
  SS_ASSIGN_OR_RETURN(params.stop_strings, get_string_list(body, "stop"));
  SS_ASSIGN_OR_RETURN(params.stop_token_ids, get_int32_list(body, "stop_token_ids"));

  if (temperature) {
    SS_TRY(check_number_range("temperature", *temperature, 0, 100));
    params.temperature = static_cast<float>(*temperature);
  }
  if (top_p) {
    SS_TRY(check_number_range("top_p", *top_p, 0, 1, /*lo_inclusive=*/false));
    params.top_p = static_cast<float>(*top_p);
  }
  if (top_k) {
    SS_TRY(check_integer_range("top_k", *top_k, -1, std::numeric_limits<int32_t>::max()));
    params.top_k = static_cast<int32_t>(*top_k);
  }
  if (min_p) {
    SS_TRY(check_number_range("min_p", *min_p, 0, 1));
    params.min_p = static_cast<float>(*min_p);
  }
  if (presence) {
    SS_TRY(check_number_range("presence_penalty", *presence, -2, 2));
    params.presence_penalty = static_cast<float>(*presence);
  }
  if (frequency) {
    SS_TRY(check_number_range("frequency_penalty", *frequency, -2, 2));
    params.frequency_penalty = static_cast<float>(*frequency);
  }
  if (repetition) {
    SS_TRY(check_number_range("repetition_penalty", *repetition, 0, 100, /*lo_inclusive=*/false));
    params.repetition_penalty = static_cast<float>(*repetition);
  }
  params.seed = seed;
  params.ignore_eos = ignore_eos.value_or(false);
  if (params.stop_strings.size() > kMaxStopStrings) {
    return errorf("'stop' may hold at most {} strings, got {}", kMaxStopStrings,
                  params.stop_strings.size());
  }
  for (size_t i = 0; i < params.stop_strings.size(); ++i) {
    if (params.stop_strings[i].empty()) return errorf("'stop[{}]' must not be empty", i);
  }
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    if (params.stop_token_ids[i] < 0) {
      return errorf("'stop_token_ids[{}]' must be >= 0, got {}", i, params.stop_token_ids[i]);
    }
  }
  return Status::ok_status();
}

// logprobs: completions take an int (0..5 alternatives); chat takes
// `logprobs: bool` plus `top_logprobs: 0..20`. -1 means no logprobs.
Result<int32_t> parse_logprobs(const OrderedJson& body, ApiEndpoint endpoint) {
  if (endpoint == ApiEndpoint::kApiCompletions) {
    SS_ASSIGN_OR_RETURN(std::optional<int64_t> logprobs, get_integer(body, "logprobs"));
    if (!logprobs) return -1;
    SS_TRY(check_integer_range("logprobs", *logprobs, 0, kMaxCompletionLogprobs));
    return static_cast<int32_t>(*logprobs);
  }
  SS_ASSIGN_OR_RETURN(std::optional<bool> logprobs, get_bool(body, "logprobs"));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> top, get_integer(body, "top_logprobs"));
  if (top) SS_TRY(check_integer_range("top_logprobs", *top, 0, kMaxChatTopLogprobs));
  if (!logprobs.value_or(false)) {
    if (top) return make_error("'top_logprobs' requires 'logprobs' to be true");
    return -1;
  }
  return static_cast<int32_t>(top.value_or(0));
}

Status parse_stream_flags(const OrderedJson& body, OpenAiRequest& request) {
  SS_ASSIGN_OR_RETURN(std::optional<bool> stream, get_bool(body, "stream"));
  SS_ASSIGN_OR_RETURN(const OrderedJson* stream_options, get_object(body, "stream_options"));
  SS_ASSIGN_OR_RETURN(std::optional<bool> skip_special, get_bool(body, "skip_special_tokens"));
  request.stream = stream.value_or(false);
  request.skip_special_tokens = skip_special.value_or(true);
  if (stream_options != nullptr) {
    if (!request.stream) {
      return make_error("'stream_options' is only allowed when 'stream' is true");
    }
    SS_ASSIGN_OR_RETURN(std::optional<bool> include_usage,
                        get_bool(*stream_options, "include_usage"));
    request.include_usage = include_usage.value_or(false);
  }
  return Status::ok_status();
}

// Speculative prefill controls. Accepted whether or not the server has a
// draft: they only tune how the prompt is prefilled, never what it means, so a
// server without one serves the request normally.
Status parse_specprefill(const OrderedJson& body, SpecPrefillControls& specprefill) {
  SS_ASSIGN_OR_RETURN(specprefill.enabled, get_bool(body, "specprefill"));
  SS_ASSIGN_OR_RETURN(specprefill.keep_pct, get_number(body, "specprefill_keep_pct"));
  // The engine's own check, so the 400 says exactly what submit() would.
  if (specprefill.keep_pct) SS_TRY(validate_keep_pct(*specprefill.keep_pct));
  return Status::ok_status();
}

// Speculative decoding control. Like the speculative prefill controls it is
// accepted whether or not the server speculates: the output's distribution is
// the target's either way, so only the speed differs.
Status parse_specdecode(const OrderedJson& body, SpecDecodeControls& specdecode) {
  SS_ASSIGN_OR_RETURN(specdecode.enabled, get_bool(body, "speculative_decoding"));
  return Status::ok_status();
}

// The request's deadline. A positive number of seconds: zero or a negative
// one would expire the request before it ran, which is a client bug to report.
Result<std::optional<double>> parse_timeout(const OrderedJson& body) {
  SS_ASSIGN_OR_RETURN(std::optional<double> timeout, get_number(body, "timeout"));
  if (timeout && !(*timeout > 0 && *timeout <= kMaxTimeoutSeconds)) {
    return errorf("'timeout' must be a number of seconds in (0, {}], got {}", kMaxTimeoutSeconds,
                  *timeout);
  }
  return timeout;
}

// max_tokens (chat: max_completion_tokens wins) against the context. The
// completions default is OpenAI's 16; the chat default is whatever room the
// context leaves.
Status resolve_max_tokens(const OrderedJson& body, ApiEndpoint endpoint, int64_t n_prompt,
                          const ServedModel& model, SamplingParams& params) {
  const bool chat = endpoint == ApiEndpoint::kApiChatCompletions;
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens, get_integer(body, "max_tokens"));
  if (chat) {
    SS_ASSIGN_OR_RETURN(std::optional<int64_t> max_completion,
                        get_integer(body, "max_completion_tokens"));
    if (max_completion) {
      if (*max_completion < 1) {
        return errorf("'max_completion_tokens' must be at least 1, got {}", *max_completion);
      }
      max_tokens = max_completion;
    }
  }
  if (max_tokens && *max_tokens < 1) {
    return errorf("'max_tokens' must be at least 1, got {}", *max_tokens);
  }
  const bool bounded = model.max_context > 0;
  int64_t requested = max_tokens.value_or(16);
  if (chat && !max_tokens) {
    // Room left in the context; at least one token so an over-long prompt
    // still gets the context error below.
    requested = bounded ? std::max<int64_t>(1, model.max_context - n_prompt) : 1 << 20;
  }
  if (bounded && n_prompt + requested > model.max_context) {
    return errorf(
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} "
        "in the {}, {} in the completion). Please reduce the length of the {} or completion.",
        model.max_context, n_prompt + requested, n_prompt, chat ? "messages" : "prompt", requested,
        chat ? "messages" : "prompt");
  }
  if (requested > std::numeric_limits<int32_t>::max()) {
    return errorf("'max_tokens' must be at most {}, got {}", std::numeric_limits<int32_t>::max(),
                  requested);
  }
  params.max_tokens = static_cast<int32_t>(requested);
  return Status::ok_status();
}

// Chat: the tools, the rendered prompt and, when a call is forced, its
// grammar. On error, `param` names the field at fault ("" for others).
Status parse_chat_prompt(const OrderedJson& body, const ServedModel& model, OpenAiRequest& request,
                         std::string& param) {
  SS_ASSIGN_OR_RETURN(ToolRequest tools, parse_tool_request(body, param));
  SS_ASSIGN_OR_RETURN(request.options.prompt, chat_prompt_ids(body, model, tools, &param));
  if (!tools.active()) return Status::ok_status();
  param = "tools";
  if (!model.tool_format) return make_error("'tools': " + model.tool_format_error);
  request.tool_calls = model.tool_format;
  param = "tool_choice";
  if (tools.forced()) {
    if (request.options.constraint != nullptr) {
      return make_error(
          "'tool_choice' required or a named function cannot be combined with a "
          "'response_format' other than text or a 'grammar'");
    }
    if (model.grammars == nullptr) {
      return make_error("'tool_choice' required or a named function is not supported here");
    }
    SS_ASSIGN_OR_RETURN(std::string gbnf, tool_call_gbnf(tools, *model.tool_format));
    auto forced = model.grammars->get(gbnf);
    if (!forced.ok()) return errorf("the tool-call grammar does not compile: {}", forced.message());
    request.options.constraint = std::move(forced).value();
  } else if (request.options.constraint == nullptr && model.grammars != nullptr) {
    // "auto": free text, but a call, once its opening marker is out, is
    // constrained to a valid call of a declared function. (With a
    // response_format or grammar, that constraint governs instead.)
    SS_ASSIGN_OR_RETURN(LazyToolGrammar lazy, tool_call_lazy_grammar(tools, *model.tool_format));
    auto compiled = model.grammars->get(lazy.gbnf);
    if (!compiled.ok()) {
      return errorf("the tool-call grammar does not compile: {}", compiled.message());
    }
    request.options.constraint = std::move(compiled).value();
    request.options.constraint_trigger = std::move(lazy.trigger);
  }
  param.clear();
  return Status::ok_status();
}

}  // namespace

Result<OpenAiRequest> parse_openai_request(ApiEndpoint endpoint, std::string_view body_text,
                                           const ServedModel& model, std::string* error_param) {
  SS_ASSIGN_OR_RETURN(OrderedJson body, parse_json_object(body_text));
  SS_TRY(merge_extra_body(body));
  SS_TRY(check_model(body, model));
  SS_TRY(reject_unsupported(body));

  OpenAiRequest request;
  request.endpoint = endpoint;
  RequestOptions& options = request.options;
  SS_TRY(parse_sampling(body, options.params));
  SS_TRY(parse_stream_flags(body, request));
  SS_ASSIGN_OR_RETURN(options.top_logprobs, parse_logprobs(body, endpoint));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> n, get_integer(body, "n"));
  if (n) SS_TRY(check_integer_range("n", *n, 1, kMaxChoices));
  options.n = static_cast<int32_t>(n.value_or(1));
  SS_TRY(parse_specprefill(body, options.specprefill));
  SS_ASSIGN_OR_RETURN(std::optional<bool> return_selection,
                      get_bool(body, "specprefill_return_selection"));
  request.specprefill_return_selection = return_selection.value_or(false);
  SS_TRY(parse_specdecode(body, options.specdecode));
  SS_ASSIGN_OR_RETURN(request.timeout_seconds, parse_timeout(body));
  std::string structured_param;
  auto constraint = parse_structured_output(body, model.grammars, structured_param);
  if (!constraint.ok()) {
    if (error_param != nullptr) *error_param = structured_param;
    return constraint.error();
  }
  options.constraint = std::move(constraint).value();

  // The prompt last: tokenizing and rendering are the expensive part.
  if (endpoint == ApiEndpoint::kApiChatCompletions) {
    std::string param;
    if (Status status = parse_chat_prompt(body, model, request, param); !status.ok()) {
      if (error_param != nullptr && !param.empty()) *error_param = param;
      return status.error();
    }
  } else {
    SS_ASSIGN_OR_RETURN(options.prompt, completion_prompt_ids(body, model));
  }
  if (options.prompt.empty()) {
    return make_error(endpoint == ApiEndpoint::kApiChatCompletions
                          ? "the rendered messages are empty"
                          : "'prompt' must not be empty");
  }
  SS_TRY(resolve_max_tokens(body, endpoint, static_cast<int64_t>(options.prompt.size()), model,
                            options.params));
  // A backstop for ranges this file does not check itself (e.g. the number of stop strings).
  if (Status status = options.params.validate(); !status.ok()) return status.error();
  return request;
}

}  // namespace specstack

#include "server/openai_response.h"

#include <cmath>

namespace specstack {
namespace {

bool is_chat(const ResponseHeader& header) {
  return header.endpoint == ApiEndpoint::kApiChatCompletions;
}

double finite_logprob(float logprob) {
  return std::isfinite(logprob) ? logprob : -9999.0;
}

OrderedJson utf8_bytes(const std::string& text) {
  OrderedJson bytes = OrderedJson::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

OrderedJson chat_logprob_entry(const std::string& token, float logprob) {
  OrderedJson entry = OrderedJson::object();
  entry["token"] = token;
  entry["logprob"] = finite_logprob(logprob);
  entry["bytes"] = utf8_bytes(token);
  return entry;
}

OrderedJson chat_logprobs(const std::vector<TokenLogprobText>& logprobs) {
  OrderedJson content = OrderedJson::array();
  for (const TokenLogprobText& item : logprobs) {
    OrderedJson entry = chat_logprob_entry(item.token, item.logprob);
    OrderedJson top = OrderedJson::array();
    for (const auto& [token, logprob] : item.top) top.push_back(chat_logprob_entry(token, logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  OrderedJson out = OrderedJson::object();
  out["content"] = std::move(content);
  return out;
}

// Offsets count bytes of the tokens' own texts, one after another: an
// approximation of OpenAI's character offsets that never needs the final text.
OrderedJson completion_logprobs(const std::vector<TokenLogprobText>& logprobs,
                                int64_t text_offset) {
  OrderedJson tokens = OrderedJson::array(), token_logprobs = OrderedJson::array(),
              top_logprobs = OrderedJson::array(), offsets = OrderedJson::array();
  for (const TokenLogprobText& item : logprobs) {
    tokens.push_back(item.token);
    token_logprobs.push_back(finite_logprob(item.logprob));
    OrderedJson top = OrderedJson::object();
    // A dict keyed by text: the sampled token is always present (as in vLLM),
    // and two ids with the same text keep the better one.
    top[item.token] = finite_logprob(item.logprob);
    for (const auto& [token, logprob] : item.top) {
      if (!top.contains(token)) top[token] = finite_logprob(logprob);
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(item.token.size());
  }
  OrderedJson out = OrderedJson::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top_logprobs);
  out["text_offset"] = std::move(offsets);
  return out;
}

OrderedJson finish_json(const ChoiceOutput& choice) {
  const std::optional<FinishReason>& finish = choice.finish;
  if (finish == FinishReason::kFinishStop && !choice.tool_calls.empty()) return "tool_calls";
  return finish ? OrderedJson(finish_reason_name(*finish)) : OrderedJson(nullptr);
}

OrderedJson header_json(const ResponseHeader& header, const char* object) {
  OrderedJson out = OrderedJson::object();
  out["id"] = header.id;
  out["object"] = object;
  out["created"] = header.created;
  out["model"] = header.model;
  return out;
}

OrderedJson specprefill_json(const SpecPrefillStats& stats) {
  OrderedJson out = OrderedJson::object();
  out["applied"] = stats.applied;
  out["prompt_tokens"] = stats.prompt_tokens;
  out["kept_tokens"] = stats.kept_tokens;
  out["scoring_ms"] = stats.scoring_ms;
  out["fallback_reason"] =
      stats.fallback_reason.empty() ? OrderedJson(nullptr) : OrderedJson(stats.fallback_reason);
  return out;
}

OrderedJson speculative_json(const SpecDecodeStats& stats) {
  OrderedJson out = OrderedJson::object();
  out["draft_tokens"] = stats.draft_tokens;
  out["accepted_tokens"] = stats.accepted_tokens;
  out["acceptance_rate"] = stats.acceptance_rate();
  return out;
}

}  // namespace

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kFinishStop:
      return "stop";
    case FinishReason::kFinishLength:
      return "length";
    case FinishReason::kFinishAbort:
      return "abort";
    case FinishReason::kFinishTimeout:
      return "timeout";
    case FinishReason::kFinishShutdown:
      return "shutdown";
  }
  return "abort";
}

OrderedJson usage_json(const UsageCounts& usage) {
  OrderedJson out = OrderedJson::object();
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  OrderedJson details = OrderedJson::object();
  details["cached_tokens"] = usage.cached_tokens;
  out["prompt_tokens_details"] = std::move(details);
  if (usage.specprefill) {
    out["specprefill"] = specprefill_json(*usage.specprefill);
    if (usage.specprefill_selection) out["specprefill"]["selection"] = *usage.specprefill_selection;
  }
  if (usage.speculative) out["speculative"] = speculative_json(*usage.speculative);
  // Rounded to the microsecond: enough for a latency, short on the wire.
  auto ms = [](const std::optional<double>& value) {
    return value ? OrderedJson(std::round(*value * 1e3) / 1e3) : OrderedJson(nullptr);
  };
  OrderedJson timing = OrderedJson::object();
  timing["queue_ms"] = ms(usage.timing.queue_ms);
  timing["ttft_ms"] = ms(usage.timing.ttft_ms);
  timing["total_ms"] = ms(usage.timing.total_ms);
  out["timing"] = std::move(timing);
  return out;
}

OrderedJson logprobs_json(ApiEndpoint endpoint, const std::vector<TokenLogprobText>& logprobs,
                          int64_t text_offset) {
  return endpoint == ApiEndpoint::kApiChatCompletions ? chat_logprobs(logprobs)
                                                      : completion_logprobs(logprobs, text_offset);
}

OrderedJson completion_response(const ResponseHeader& header,
                                const std::vector<ChoiceOutput>& choices, const UsageCounts& usage,
                                bool want_logprobs) {
  OrderedJson out = header_json(header, is_chat(header) ? "chat.completion" : "text_completion");
  OrderedJson list = OrderedJson::array();
  for (const ChoiceOutput& choice : choices) {
    OrderedJson item = OrderedJson::object();
    item["index"] = choice.index;
    if (is_chat(header)) {
      OrderedJson message = OrderedJson::object();
      message["role"] = "assistant";
      message["content"] = choice.text;
      if (!choice.tool_calls.empty()) {
        // OpenAI: content is null when the answer is only calls.
        const size_t first = choice.text.find_first_not_of(" \t\r\n");
        const size_t last = choice.text.find_last_not_of(" \t\r\n");
        message["content"] = first == std::string::npos
                                 ? OrderedJson(nullptr)
                                 : OrderedJson(choice.text.substr(first, last - first + 1));
        message["tool_calls"] = tool_calls_json(choice.tool_calls);
      }
      item["message"] = std::move(message);
    } else {
      item["text"] = choice.text;
    }
    item["logprobs"] =
        want_logprobs ? logprobs_json(header.endpoint, choice.logprobs, 0) : OrderedJson(nullptr);
    item["finish_reason"] = finish_json(choice);
    list.push_back(std::move(item));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

OrderedJson stream_chunk(const ResponseHeader& header, const ChoiceOutput& delta,
                         bool want_logprobs, bool with_null_usage) {
  OrderedJson out =
      header_json(header, is_chat(header) ? "chat.completion.chunk" : "text_completion");
  OrderedJson item = OrderedJson::object();
  item["index"] = delta.index;
  if (is_chat(header)) {
    OrderedJson content = OrderedJson::object();
    if (delta.first_chunk) content["role"] = "assistant";
    // The first chunk carries "" like OpenAI's; a finishing chunk with no new
    // text has an empty delta.
    if (delta.first_chunk || !delta.text.empty()) content["content"] = delta.text;
    item["delta"] = std::move(content);
  } else {
    item["text"] = delta.text;
  }
  item["logprobs"] = want_logprobs && !delta.logprobs.empty()
                         ? logprobs_json(header.endpoint, delta.logprobs, delta.text_offset)
                         : OrderedJson(nullptr);
  item["finish_reason"] = finish_json(delta);
  OrderedJson list = OrderedJson::array();
  list.push_back(std::move(item));
  out["choices"] = std::move(list);
  if (with_null_usage) out["usage"] = nullptr;
  return out;
}

OrderedJson tool_call_delta_chunk(const ResponseHeader& header, int32_t index,
                                  const ToolCallDelta& call, bool with_null_usage) {
  OrderedJson call_delta = OrderedJson::object();
  call_delta["index"] = call.index;
  if (call.opening) {
    call_delta["id"] = call.id;
    call_delta["type"] = "function";
    call_delta["function"] = OrderedJson{{"name", call.name}, {"arguments", ""}};
  } else {
    call_delta["function"] = OrderedJson{{"arguments", call.arguments}};
  }
  OrderedJson delta = OrderedJson::object();
  delta["tool_calls"] = OrderedJson::array({std::move(call_delta)});
  OrderedJson item = OrderedJson::object();
  item["index"] = index;
  item["delta"] = std::move(delta);
  item["logprobs"] = nullptr;
  item["finish_reason"] = nullptr;
  OrderedJson out = header_json(header, "chat.completion.chunk");
  out["choices"] = OrderedJson::array({std::move(item)});
  if (with_null_usage) out["usage"] = nullptr;
  return out;
}

OrderedJson usage_chunk(const ResponseHeader& header, const UsageCounts& usage) {
  OrderedJson out =
      header_json(header, is_chat(header) ? "chat.completion.chunk" : "text_completion");
  out["choices"] = OrderedJson::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const OrderedJson& chunk) {
  return "data: " + json_text(chunk) + "\n\n";
}

std::string json_text(const OrderedJson& value) {
  return value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace specstack

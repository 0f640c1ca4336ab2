#include "server/openai_response.h"

#include <cmath>

namespace specstack {
namespace {

bool is_chat(const ResponseHeader& header) {
  return header.endpoint == ApiEndpoint::kApiChatCompletions;
}

double finite_logprob(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

Json utf8_bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json chat_logprob_entry(const std::string& token, float logprob) {
  Json entry = Json::object();
  entry["token"] = token;
  entry["logprob"] = finite_logprob(logprob);
  entry["bytes"] = utf8_bytes(token);
  return entry;
}

Json chat_logprobs(const std::vector<TokenLogprobText>& logprobs) {
  Json content = Json::array();
  for (const TokenLogprobText& item : logprobs) {
    Json entry = chat_logprob_entry(item.token, item.logprob);
    Json top = Json::array();
    for (const auto& [token, logprob] : item.top) top.push_back(chat_logprob_entry(token, logprob));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  Json out = Json::object();
  out["content"] = std::move(content);
  return out;
}

// Offsets count bytes of the tokens' own texts, one after another: an
// approximation of OpenAI's character offsets that never needs the final text.
Json completion_logprobs(const std::vector<TokenLogprobText>& logprobs, int64_t text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
       offsets = Json::array();
  for (const TokenLogprobText& item : logprobs) {
    tokens.push_back(item.token);
    token_logprobs.push_back(finite_logprob(item.logprob));
    Json top = Json::object();
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
  Json out = Json::object();
  out["tokens"] = std::move(tokens);
  out["token_logprobs"] = std::move(token_logprobs);
  out["top_logprobs"] = std::move(top_logprobs);
  out["text_offset"] = std::move(offsets);
  return out;
}

Json finish_json(const std::optional<FinishReason>& finish) {
  return finish ? Json(finish_reason_name(*finish)) : Json(nullptr);
}

Json header_json(const ResponseHeader& header, const char* object) {
  Json out = Json::object();
  out["id"] = header.id;
  out["object"] = object;
  out["created"] = header.created;
  out["model"] = header.model;
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
  }
  return "abort";
}

Json usage_json(const UsageCounts& usage) {
  Json out = Json::object();
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  Json details = Json::object();
  details["cached_tokens"] = usage.cached_tokens;
  out["prompt_tokens_details"] = std::move(details);
  return out;
}

Json logprobs_json(ApiEndpoint endpoint, const std::vector<TokenLogprobText>& logprobs,
                   int64_t text_offset) {
  return endpoint == ApiEndpoint::kApiChatCompletions ? chat_logprobs(logprobs)
                                                      : completion_logprobs(logprobs, text_offset);
}

Json completion_response(const ResponseHeader& header, const std::vector<ChoiceOutput>& choices,
                         const UsageCounts& usage, bool want_logprobs) {
  Json out = header_json(header, is_chat(header) ? "chat.completion" : "text_completion");
  Json list = Json::array();
  for (const ChoiceOutput& choice : choices) {
    Json item = Json::object();
    item["index"] = choice.index;
    if (is_chat(header)) {
      Json message = Json::object();
      message["role"] = "assistant";
      message["content"] = choice.text;
      item["message"] = std::move(message);
    } else {
      item["text"] = choice.text;
    }
    item["logprobs"] = want_logprobs ? logprobs_json(header.endpoint, choice.logprobs, 0)
                                     : Json(nullptr);
    item["finish_reason"] = finish_json(choice.finish);
    list.push_back(std::move(item));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

Json stream_chunk(const ResponseHeader& header, const ChoiceOutput& delta, bool want_logprobs,
                  bool with_null_usage) {
  Json out = header_json(header, is_chat(header) ? "chat.completion.chunk" : "text_completion");
  Json item = Json::object();
  item["index"] = delta.index;
  if (is_chat(header)) {
    Json content = Json::object();
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
                         : Json(nullptr);
  item["finish_reason"] = finish_json(delta.finish);
  Json list = Json::array();
  list.push_back(std::move(item));
  out["choices"] = std::move(list);
  if (with_null_usage) out["usage"] = nullptr;
  return out;
}

Json usage_chunk(const ResponseHeader& header, const UsageCounts& usage) {
  Json out = header_json(header, is_chat(header) ? "chat.completion.chunk" : "text_completion");
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const Json& chunk) { return "data: " + json_text(chunk) + "\n\n"; }

std::string json_text(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace specstack

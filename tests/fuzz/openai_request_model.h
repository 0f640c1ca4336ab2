// The model that OpenAI request bodies are parsed against by the
// openai_request fuzz target and by its corpus replay (tests/server): the
// TinyStories tokenizer with the Qwen3 chat template (tools, thinking
// switches, content parts), so both endpoints reach tokenization. Header-only
// because the fuzz target and the test programs share no library.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/status.h"
#include "chat/chat_template.h"
#include "server/openai_request.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace specstack::fuzzing {

inline constexpr int64_t kFuzzMaxContext = 1024;

struct FuzzServedModel {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat_template;
  std::unique_ptr<GrammarCache> grammars;  // response_format, grammar, forced tool calls
  ServedModel served;                      // points into the three above
};

inline Result<std::string> read_fuzz_data_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return errorf("cannot read {}", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// data_dir: tests/data.
inline Result<std::unique_ptr<FuzzServedModel>> make_fuzz_served_model(
    const std::string& data_dir) {
  const std::string tokenizer_dir = data_dir + "/golden/tokenizers/tinystories";
  SS_ASSIGN_OR_RETURN(std::string tokenizer_json,
                      read_fuzz_data_file(tokenizer_dir + "/tokenizer.json"));
  SS_ASSIGN_OR_RETURN(std::string tokenizer_config,
                      read_fuzz_data_file(tokenizer_dir + "/tokenizer_config.json"));
  SS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_json(tokenizer_json, tokenizer_config));
  SS_ASSIGN_OR_RETURN(
      std::string qwen3_config,
      read_fuzz_data_file(data_dir + "/golden/tokenizers/qwen3/tokenizer_config.json"));
  const nlohmann::json config = nlohmann::json::parse(qwen3_config, nullptr, false);
  if (!config.is_object() || !config.contains("chat_template") ||
      !config["chat_template"].is_string()) {
    return make_error("qwen3 tokenizer_config.json has no chat_template string");
  }
  SS_ASSIGN_OR_RETURN(ChatTemplate chat_template,
                      ChatTemplate::parse(config["chat_template"].get<std::string>()));
  SS_ASSIGN_OR_RETURN(ToolCallFormat tool_format,
                      detect_tool_call_format(config["chat_template"].get<std::string>()));

  auto model = std::make_unique<FuzzServedModel>();
  model->tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer));
  model->chat_template = std::make_unique<ChatTemplate>(std::move(chat_template));
  model->served.tokenizer = model->tokenizer.get();
  model->served.chat_template = model->chat_template.get();
  model->served.name = "tiny";
  model->served.max_context = kFuzzMaxContext;
  model->served.vocab_size = model->tokenizer->vocab_size();
  model->served.tool_format = tool_format;
  model->grammars = std::make_unique<GrammarCache>(*model->tokenizer);
  model->served.grammars = model->grammars.get();
  return model;
}

// What every accepted request must satisfy, so the engine never sees a value
// it would reject; "" when it holds, else the broken rule.
inline std::string check_accepted_request(const OpenAiRequest& request, const ServedModel& model) {
  const RequestOptions& options = request.options;
  if (options.prompt.empty()) return "empty prompt";
  for (const int32_t id : options.prompt) {
    if (id < 0 || id >= model.vocab_size) return "prompt id out of range";
  }
  const SamplingParams& params = options.params;
  if (params.max_tokens < 1) return "max_tokens < 1";
  if (static_cast<int64_t>(options.prompt.size()) + params.max_tokens > model.max_context) {
    return "prompt + max_tokens over the context";
  }
  if (options.n < 1 || options.n > kMaxChoices) return "n out of range";
  const int64_t max_top = request.endpoint == ApiEndpoint::kApiCompletions ? kMaxCompletionLogprobs
                                                                           : kMaxChatTopLogprobs;
  if (options.top_logprobs < -1 || options.top_logprobs > max_top) {
    return "top_logprobs out of range";
  }
  if (request.include_usage && !request.stream) return "include_usage without stream";
  if (Status status = params.validate(); !status.ok()) {
    return "sampling params fail validate(): " + status.message();
  }
  return "";
}

}  // namespace specstack::fuzzing

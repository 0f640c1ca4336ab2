// What tokenizer_config.json contributes: the bos/eos token names,
// add_bos_token and the chat template. Its other keys (added_tokens_decoder,
// model_max_length ...) are not needed: tokenizer.json decides encoding.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace specstack {

struct TokenizerConfig {
  std::string bos_token;      // "" if none
  std::string eos_token;      // "" if none
  std::string chat_template;  // "" if none
  std::optional<bool> add_bos_token;
};

// An empty text gives the empty config (the file is optional).
Result<TokenizerConfig> parse_tokenizer_config(std::string_view json_text);

}  // namespace specstack

#include "tokenizer/tokenizer_config.h"

#include "tokenizer/json_fields.h"

namespace specstack {

namespace {

using tok::find_field;
using tok::Json;

// bos_token / eos_token: "text", {"content": "text", ...} or null.
Result<std::string> token_name(const Json& config, std::string_view key) {
  const Json* value = find_field(config, key);
  if (value == nullptr || value->is_null()) return std::string();
  if (value->is_string()) return value->get<std::string>();
  if (const Json* content = find_field(*value, "content");
      content != nullptr && content->is_string()) {
    return content->get<std::string>();
  }
  return errorf("{}: expected a string or {{\"content\": ...}}", key);
}

// chat_template: a string, or a list of {"name", "template"} (take "default").
Result<std::string> chat_template(const Json& config) {
  const Json* value = find_field(config, "chat_template");
  if (value == nullptr || value->is_null()) return std::string();
  if (value->is_string()) return value->get<std::string>();
  if (!value->is_array()) return make_error("chat_template: expected a string or a list");
  for (size_t i = 0; i < value->size(); ++i) {
    const Json& entry = (*value)[i];
    const Json* name = find_field(entry, "name");
    const Json* text = find_field(entry, "template");
    if (name == nullptr || !name->is_string() || text == nullptr || !text->is_string()) {
      return errorf("chat_template[{}]: expected {{\"name\": ..., \"template\": ...}}", i);
    }
    if (name->get<std::string>() == "default") return text->get<std::string>();
  }
  return std::string();
}

}  // namespace

Result<TokenizerConfig> parse_tokenizer_config(std::string_view json_text) {
  TokenizerConfig config;
  if (json_text.empty()) return config;
  Json json = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return make_error("not valid JSON");
  if (!json.is_object()) return make_error("expected a JSON object");
  SS_ASSIGN_OR_RETURN(config.bos_token, token_name(json, "bos_token"));
  SS_ASSIGN_OR_RETURN(config.eos_token, token_name(json, "eos_token"));
  SS_ASSIGN_OR_RETURN(config.chat_template, chat_template(json));
  if (const Json* add_bos = find_field(json, "add_bos_token");
      add_bos != nullptr && !add_bos->is_null()) {
    if (!add_bos->is_boolean()) return make_error("add_bos_token: expected true or false");
    config.add_bos_token = add_bos->get<bool>();
  }
  return config;
}

}  // namespace specstack

#include "server/chat_prompt.h"

#include <string>
#include <string_view>
#include <vector>

namespace specstack {
namespace {

Result<OrderedJson> flatten_content(const OrderedJson& content, size_t index) {
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array()) {
    return errorf("'messages[{}].content' must be a string or an array of content parts, got {}",
                  index, json_type_name(content));
  }
  std::string text;
  for (size_t part = 0; part < content.size(); ++part) {
    const OrderedJson& item = content[part];
    const auto type = item.is_object() ? item.find("type") : item.end();
    if (!item.is_object() || type == item.end() || !type->is_string()) {
      return errorf("'messages[{}].content[{}]' must be an object with a string 'type'", index,
                    part);
    }
    if (*type != "text") {
      return errorf("'messages[{}].content[{}]': only 'text' content parts are supported, got '{}'",
                    index, part, type->get<std::string>());
    }
    const auto part_text = item.find("text");
    if (part_text == item.end() || !part_text->is_string()) {
      return errorf("'messages[{}].content[{}].text' must be a string", index, part);
    }
    if (part > 0) text += "\n";
    text += part_text->get<std::string>();
  }
  return OrderedJson(std::move(text));
}

// vLLM's continue_final_message: the prompt ends inside the last message, so
// cut the rendering (and its user-text ranges) right after that message's
// content.
Status cut_after_final_content(ChatRender& rendered, const OrderedJson& messages) {
  const OrderedJson& last = messages.back();
  const auto content = last.find("content");
  if (content == last.end() || !content->is_string() || content->get<std::string>().empty()) {
    return make_error("'continue_final_message' needs a final message with non-empty content");
  }
  const std::string& text = content->get_ref<const std::string&>();
  const size_t at = rendered.text.rfind(text);
  if (at == std::string::npos) {
    return make_error(
        "'continue_final_message': the chat template does not reproduce the final message's "
        "content verbatim");
  }
  rendered.text.resize(at + text.size());
  rendered.user_text = slice_ranges(rendered.user_text, 0, rendered.text.size());
  return {};
}

// An assistant message's tool_calls as the templates expect them:
// function.arguments an object (clients send the JSON string OpenAI returned).
Status normalize_tool_calls(OrderedJson& message, size_t index) {
  const auto calls = message.find("tool_calls");
  if (calls == message.end() || calls->is_null()) return {};
  if (!calls->is_array()) return errorf("'messages[{}].tool_calls' must be an array", index);
  for (size_t j = 0; j < calls->size(); ++j) {
    OrderedJson& call = (*calls)[j];
    const auto function = call.is_object() ? call.find("function") : call.end();
    if (!call.is_object() || function == call.end() || !function->is_object() ||
        !function->contains("name") || !(*function)["name"].is_string()) {
      return errorf(
          "'messages[{}].tool_calls[{}]' must be {{\"function\": {{\"name\": ..., "
          "\"arguments\": ...}}}}",
          index, j);
    }
    auto arguments = function->find("arguments");
    if (arguments != function->end() && arguments->is_string()) {
      OrderedJson parsed =
          OrderedJson::parse(arguments->get_ref<const std::string&>(), nullptr, false);
      if (!parsed.is_object()) {
        return errorf(
            "'messages[{}].tool_calls[{}].function.arguments' must be a JSON object encoded as a "
            "string",
            index, j);
      }
      *arguments = std::move(parsed);
    }
  }
  if (const auto content = message.find("content");
      content == message.end() || content->is_null()) {
    message["content"] = "";
  }
  return {};
}

}  // namespace

Result<OrderedJson> normalize_messages(const OrderedJson& body) {
  const auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) return make_error("'messages' is required");
  if (!messages->is_array()) {
    return errorf("'messages' must be an array, got {}", json_type_name(*messages));
  }
  if (messages->empty()) return make_error("'messages' must not be empty");
  OrderedJson normalized = OrderedJson::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const OrderedJson& message = (*messages)[i];
    if (!message.is_object()) {
      return errorf("'messages[{}]' must be an object, got {}", i, json_type_name(message));
    }
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) {
      return errorf("'messages[{}].role' must be a string", i);
    }
    OrderedJson copy = message;
    if (const auto content = message.find("content"); content != message.end()) {
      SS_ASSIGN_OR_RETURN(copy["content"], flatten_content(*content, i));
    }
    if (*role == "assistant") SS_TRY(normalize_tool_calls(copy, i));
    if (*role == "tool") {
      // OpenAI sends it; the templates of the supported families do not
      // print it, so a client that leaves it out is not refused.
      const auto id = message.find("tool_call_id");
      if (id != message.end() && !id->is_string()) {
        return errorf("'messages[{}].tool_call_id' must be a string (the id of the call answered)",
                      i);
      }
    }
    normalized.push_back(std::move(copy));
  }
  return normalized;
}

Result<std::vector<int32_t>> chat_prompt_ids(const OrderedJson& body, const ServedModel& model,
                                             const ToolRequest& tools, std::string* error_param) {
  if (model.chat_template == nullptr) {
    return errorf("this model cannot serve chat completions: {}", model.chat_template_error.empty()
                                                                      ? "it has no chat template"
                                                                      : model.chat_template_error);
  }
  SS_ASSIGN_OR_RETURN(OrderedJson messages, normalize_messages(body));
  SS_ASSIGN_OR_RETURN(std::optional<bool> add_generation_prompt,
                      get_bool(body, "add_generation_prompt"));
  SS_ASSIGN_OR_RETURN(std::optional<bool> continue_final, get_bool(body, "continue_final_message"));
  SS_ASSIGN_OR_RETURN(const OrderedJson* kwargs, get_object(body, "chat_template_kwargs"));
  const bool continue_final_message = continue_final.value_or(false);
  if (continue_final_message && add_generation_prompt.value_or(false)) {
    return make_error("'continue_final_message' and 'add_generation_prompt' cannot both be true");
  }

  OrderedJson context = OrderedJson::object();
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt.value_or(!continue_final_message);
  context["bos_token"] = model.tokenizer->bos_token();
  context["eos_token"] = model.tokenizer->eos_token();
  if (tools.active()) context["tools"] = body["tools"];
  // Every string the request supplies is user text; bos_token, eos_token and
  // add_generation_prompt come from the server.
  std::vector<std::string> kwarg_keys;
  if (kwargs != nullptr) {
    // Template switches such as Qwen3's enable_thinking; they may not replace
    // the conversation itself. Their strings are request text too.
    for (const auto& [key, value] : kwargs->items()) {
      if (key == "messages") continue;
      context[key] = value;
      kwarg_keys.push_back(key);
    }
  }
  std::vector<std::string_view> user_text_keys(kChatRequestKeys.begin(), kChatRequestKeys.end());
  user_text_keys.insert(user_text_keys.end(), kwarg_keys.begin(), kwarg_keys.end());
  auto rendered = model.chat_template->render_marked(context, user_text_keys);
  if (!rendered.ok()) {
    return errorf("the chat template could not render these messages: {}", rendered.message());
  }
  if (tools.active()) {
    // A template that ignores `tools` would hide them from the model, which
    // then could only be forced into calls it was never told about.
    OrderedJson without = context;
    without.erase("tools");
    auto plain = model.chat_template->render(without);
    if (plain.ok() && *plain == rendered->text) {
      if (error_param != nullptr) *error_param = "tools";
      return make_error(
          "'tools': this model's chat template does not render tools, so it cannot do tool "
          "calling");
    }
  }
  if (continue_final_message) SS_TRY(cut_after_final_content(*rendered, messages));
  EncodeOptions encode;  // the template writes BOS itself
  if (model.chat_content == ChatContentTokens::kPlainText) encode.plain_text = rendered->user_text;
  return model.tokenizer->encode(rendered->text, encode);
}

}  // namespace specstack

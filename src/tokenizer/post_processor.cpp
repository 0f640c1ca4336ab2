#include "tokenizer/post_processor.h"

namespace specstack::tok {

namespace {

class SequencePostProcessor final : public PostProcessor {
 public:
  explicit SequencePostProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void process(std::vector<int32_t>& ids) const override {
    for (const auto& part : parts_) part->process(ids);
  }
  void added_ids(std::vector<int32_t>& out) const override {
    for (const auto& part : parts_) part->added_ids(out);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

class IdentityPostProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&) const override {}
  void added_ids(std::vector<int32_t>&) const override {}
};

// The single-sequence template flattened: ids before and after $A.
class WrapPostProcessor final : public PostProcessor {
 public:
  WrapPostProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void process(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), before_.begin(), before_.end());
    ids.insert(ids.end(), after_.begin(), after_.end());
  }
  void added_ids(std::vector<int32_t>& out) const override {
    out.insert(out.end(), before_.begin(), before_.end());
    out.insert(out.end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

Result<std::unique_ptr<PostProcessor>> parse_template(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(const Json* single, require_array(json, "single", path));
  const Json* special_tokens = find_field(json, "special_tokens");
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    const std::string item_path = index_path(field_path(path, "single"), i);
    if (find_field(item, "Sequence") != nullptr) {
      // The single template has one sequence ($A); a $B there is ignored.
      if (seen_sequence)
        return errorf("{}: more than one sequence in the single template", item_path);
      seen_sequence = true;
      continue;
    }
    const Json* special = find_field(item, "SpecialToken");
    if (special == nullptr) {
      return errorf("{}: expected {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}", item_path);
    }
    SS_ASSIGN_OR_RETURN(std::string name,
                        require_string(*special, "id", field_path(item_path, "SpecialToken")));
    const Json* entry = special_tokens != nullptr ? find_field(*special_tokens, name) : nullptr;
    if (entry == nullptr) {
      return errorf("{}: special token \"{}\" is not in special_tokens", item_path, name);
    }
    const std::string entry_path = field_path(field_path(path, "special_tokens"), name);
    SS_ASSIGN_OR_RETURN(const Json* ids, require_array(*entry, "ids", entry_path));
    for (size_t k = 0; k < ids->size(); ++k) {
      SS_ASSIGN_OR_RETURN(int32_t id,
                          as_token_id((*ids)[k], index_path(field_path(entry_path, "ids"), k)));
      (seen_sequence ? after : before).push_back(id);
    }
  }
  return std::unique_ptr<PostProcessor>(
      std::make_unique<WrapPostProcessor>(std::move(before), std::move(after)));
}

// Bert/Roberta: "cls"/"sep" are ["token", id] pairs: cls + $A + sep.
Result<std::unique_ptr<PostProcessor>> parse_cls_sep(const Json& json, const std::string& path) {
  std::vector<int32_t> ids;
  for (const char* key : {"cls", "sep"}) {
    SS_ASSIGN_OR_RETURN(const Json* pair, require_array(json, key, path));
    if (pair->size() != 2) return errorf("{}: expected [token, id]", field_path(path, key));
    SS_ASSIGN_OR_RETURN(int32_t id, as_token_id((*pair)[1], index_path(field_path(path, key), 1)));
    ids.push_back(id);
  }
  return std::unique_ptr<PostProcessor>(std::make_unique<WrapPostProcessor>(
      std::vector<int32_t>{ids[0]}, std::vector<int32_t>{ids[1]}));
}

}  // namespace

Result<std::unique_ptr<PostProcessor>> parse_post_processor(const Json& json,
                                                            const std::string& path, int depth) {
  if (json.is_null()) return std::unique_ptr<PostProcessor>();
  if (depth > kMaxComponentDepth) return errorf("{}: nested too deeply", path);
  SS_ASSIGN_OR_RETURN(std::string type, require_string(json, "type", path));
  if (type == "Sequence") {
    SS_ASSIGN_OR_RETURN(const Json* list, require_array(json, "processors", path));
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item_path = index_path(field_path(path, "processors"), i);
      SS_ASSIGN_OR_RETURN(auto part, parse_post_processor((*list)[i], item_path, depth + 1));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PostProcessor>(
        std::make_unique<SequencePostProcessor>(std::move(parts)));
  }
  if (type == "TemplateProcessing") return parse_template(json, path);
  if (type == "BertProcessing" || type == "RobertaProcessing") return parse_cls_sep(json, path);
  if (type == "ByteLevel") {
    return std::unique_ptr<PostProcessor>(std::make_unique<IdentityPostProcessor>());
  }
  return errorf(
      "{}: unsupported post_processor type \"{}\" (supported: TemplateProcessing, BertProcessing, "
      "RobertaProcessing, ByteLevel, Sequence)",
      path, type);
}

}  // namespace specstack::tok

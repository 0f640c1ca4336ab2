#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/nfc.h"
#include "tokenizer/replace.h"

namespace specstack::tok {

namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& text) const override {
    for (const auto& part : parts_) part->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // HF leaves empty text alone
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  explicit ReplaceNormalizer(Replacer replacer) : replacer_(std::move(replacer)) {}
  void normalize(std::string& text) const override { text = replacer_.apply(text); }

 private:
  Replacer replacer_;
};

class NfcNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = to_nfc(text); }
};

}  // namespace

Result<std::unique_ptr<Normalizer>> parse_normalizer(const Json& json, const std::string& path,
                                                     int depth) {
  if (json.is_null()) return std::unique_ptr<Normalizer>();
  if (depth > kMaxComponentDepth) return errorf("{}: nested too deeply", path);
  SS_ASSIGN_OR_RETURN(std::string type, require_string(json, "type", path));
  if (type == "Sequence") {
    SS_ASSIGN_OR_RETURN(const Json* list, require_array(json, "normalizers", path));
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item_path = index_path(field_path(path, "normalizers"), i);
      SS_ASSIGN_OR_RETURN(auto part, parse_normalizer((*list)[i], item_path, depth + 1));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Normalizer>(std::make_unique<SequenceNormalizer>(std::move(parts)));
  }
  if (type == "Prepend") {
    SS_ASSIGN_OR_RETURN(std::string prefix, require_string(json, "prepend", path));
    return std::unique_ptr<Normalizer>(std::make_unique<PrependNormalizer>(std::move(prefix)));
  }
  if (type == "Replace") {
    SS_ASSIGN_OR_RETURN(Replacer replacer, Replacer::parse(json, path));
    return std::unique_ptr<Normalizer>(std::make_unique<ReplaceNormalizer>(std::move(replacer)));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(std::make_unique<NfcNormalizer>());
  return errorf(
      "{}: unsupported normalizer type \"{}\" (supported: Sequence, Prepend, Replace, NFC)", path,
      type);
}

}  // namespace specstack::tok

#include "tokenizer/pre_tokenizer.h"

#include <optional>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/split_behavior.h"
#include "tokenizer/utf8.h"

namespace specstack::tok {

namespace {

// GPT-2's word pattern, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits every piece by `split(text)` -> [start, end) ranges of that text.
template <typename SplitFn>
void split_pieces(std::vector<PreToken>& pieces, SplitFn&& split) {
  std::vector<PreToken> out;
  out.reserve(pieces.size());
  for (PreToken& piece : pieces) {
    for (const auto& [start, end] : split(piece.text)) {
      if (end == start) continue;
      out.push_back({piece.text.substr(start, end - start), piece.at_start && start == 0});
    }
  }
  pieces = std::move(out);
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& part : parts_) part->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_pieces(pieces, [&](const std::string& text) {
      return apply_split_behavior(mark_matches(regex_.find_all(text), text.size(), invert_),
                                  behavior_);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& piece : pieces) {
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(piece.text.begin(), ' ');
      }
    }
    if (regex_) {
      split_pieces(pieces, [&](const std::string& text) {
        return apply_split_behavior(mark_matches(regex_->find_all(text), text.size(), false),
                                    SplitBehavior::kIsolated);
      });
    }
    for (PreToken& piece : pieces) {
      std::string mapped;
      map_.encode(piece.text, mapped);
      piece.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
  ByteLevelMap map_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& piece : pieces) {
      std::string replaced;
      for (const char c : piece.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced += c;
        }
      }
      const bool starts_with_replacement =
          replaced.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts_with_replacement && (scheme_ == PrependScheme::kAlways ||
                                       (scheme_ == PrependScheme::kFirst && piece.at_start))) {
        replaced.insert(0, replacement_);
      }
      piece.text = std::move(replaced);
    }
    if (!split_) return;
    // Each replacement character starts a new word (MergedWithNext).
    split_pieces(pieces, [&](const std::string& text) {
      std::vector<std::pair<size_t, size_t>> hits;
      for (size_t hit = text.find(replacement_); hit != std::string::npos;
           hit = text.find(replacement_, hit + replacement_.size())) {
        hits.emplace_back(hit, hit + replacement_.size());
      }
      return apply_split_behavior(mark_matches(hits, text.size(), false),
                                  SplitBehavior::kMergedWithNext);
    });
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

Result<std::unique_ptr<PreTokenizer>> parse_split(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(auto pattern, parse_pattern(json, "pattern", path));
  auto regex = Regex::compile(pattern.first, /*literal=*/!pattern.second);
  if (!regex.ok()) return errorf("{}: {}", field_path(path, "pattern"), regex.message());
  SS_ASSIGN_OR_RETURN(std::string behavior_name, require_string(json, "behavior", path));
  SS_ASSIGN_OR_RETURN(SplitBehavior behavior,
                      parse_split_behavior(behavior_name, field_path(path, "behavior")));
  SS_ASSIGN_OR_RETURN(bool invert, optional_bool(json, "invert", false, path));
  return std::unique_ptr<PreTokenizer>(
      std::make_unique<SplitPreTokenizer>(std::move(regex).value(), behavior, invert));
}

Result<std::unique_ptr<PreTokenizer>> parse_byte_level(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(bool add_prefix_space, optional_bool(json, "add_prefix_space", true, path));
  SS_ASSIGN_OR_RETURN(bool use_regex, optional_bool(json, "use_regex", true, path));
  std::optional<Regex> regex;
  if (use_regex) {
    auto compiled = Regex::compile(kGpt2Pattern);
    if (!compiled.ok()) return errorf("{}: {}", path, compiled.message());
    regex = std::move(compiled).value();
  }
  return std::unique_ptr<PreTokenizer>(
      std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex)));
}

Result<std::unique_ptr<PreTokenizer>> parse_metaspace(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string replacement, require_string(json, "replacement", path));
  if (replacement.empty()) return errorf("{}: empty", field_path(path, "replacement"));
  SS_ASSIGN_OR_RETURN(bool split, optional_bool(json, "split", true, path));
  SS_ASSIGN_OR_RETURN(auto scheme_name, optional_string(json, "prepend_scheme", path));
  PrependScheme scheme;
  if (!scheme_name) {  // files older than prepend_scheme say add_prefix_space
    SS_ASSIGN_OR_RETURN(bool add_prefix_space, optional_bool(json, "add_prefix_space", true, path));
    scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
  } else if (*scheme_name == "always") {
    scheme = PrependScheme::kAlways;
  } else if (*scheme_name == "first") {
    scheme = PrependScheme::kFirst;
  } else if (*scheme_name == "never") {
    scheme = PrependScheme::kNever;
  } else {
    return errorf("{}: unknown prepend_scheme \"{}\"", field_path(path, "prepend_scheme"),
                  *scheme_name);
  }
  return std::unique_ptr<PreTokenizer>(
      std::make_unique<MetaspacePreTokenizer>(std::move(replacement), scheme, split));
}

}  // namespace

Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& json, const std::string& path,
                                                          int depth) {
  if (json.is_null()) return std::unique_ptr<PreTokenizer>();
  if (depth > kMaxComponentDepth) return errorf("{}: nested too deeply", path);
  SS_ASSIGN_OR_RETURN(std::string type, require_string(json, "type", path));
  if (type == "Sequence") {
    SS_ASSIGN_OR_RETURN(const Json* list, require_array(json, "pretokenizers", path));
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item_path = index_path(field_path(path, "pretokenizers"), i);
      SS_ASSIGN_OR_RETURN(auto part, parse_pre_tokenizer((*list)[i], item_path, depth + 1));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<PreTokenizer>(std::make_unique<SequencePreTokenizer>(std::move(parts)));
  }
  if (type == "Split") return parse_split(json, path);
  if (type == "ByteLevel") return parse_byte_level(json, path);
  if (type == "Metaspace") return parse_metaspace(json, path);
  return errorf(
      "{}: unsupported pre_tokenizer type \"{}\" (supported: Sequence, Split, ByteLevel, "
      "Metaspace)",
      path, type);
}

}  // namespace specstack::tok

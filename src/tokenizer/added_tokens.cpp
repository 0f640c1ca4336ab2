#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace specstack::tok {

void TokenTrie::insert(std::string_view pattern, int32_t value) {
  int32_t node = 0;
  for (const char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    auto& children = nodes_[node].children;
    auto it = std::find_if(children.begin(), children.end(),
                           [&](const auto& child) { return child.first == byte; });
    if (it != children.end()) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes_.size());
    children.emplace_back(byte, next);
    nodes_.emplace_back();
    node = next;
  }
  // A later token with the same pattern wins, as a later HF entry would.
  nodes_[node].value = value;
}

int32_t TokenTrie::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::find_if(children.begin(), children.end(),
                         [&](const auto& c) { return c.first == byte; });
  return it == children.end() ? -1 : it->second;
}

Result<AddedVocabulary> AddedVocabulary::parse(const Json& added_tokens, const std::string& path,
                                               const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (added_tokens.is_null()) return vocab;
  if (!added_tokens.is_array()) return errorf("{}: expected an array", path);
  bool any_single_word = false;
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Json& item = added_tokens[i];
    const std::string item_path = index_path(path, i);
    AddedToken token;
    SS_ASSIGN_OR_RETURN(const Json* id, require_field(item, "id", item_path));
    SS_ASSIGN_OR_RETURN(token.id, as_token_id(*id, field_path(item_path, "id")));
    SS_ASSIGN_OR_RETURN(token.content, require_string(item, "content", item_path));
    SS_ASSIGN_OR_RETURN(token.special, optional_bool(item, "special", false, item_path));
    SS_ASSIGN_OR_RETURN(token.normalized,
                        optional_bool(item, "normalized", !token.special, item_path));
    SS_ASSIGN_OR_RETURN(token.lstrip, optional_bool(item, "lstrip", false, item_path));
    SS_ASSIGN_OR_RETURN(token.rstrip, optional_bool(item, "rstrip", false, item_path));
    SS_ASSIGN_OR_RETURN(token.single_word, optional_bool(item, "single_word", false, item_path));
    if (token.content.empty()) continue;  // HF ignores empty tokens
    any_single_word |= token.single_word;
    // We keep the file's ids (HF re-derives them and warns when they differ).
    vocab.by_id_[token.id] = vocab.tokens_.size();
    vocab.by_content_[token.content] = token.id;
    vocab.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    AddedToken& token = vocab.tokens_[i];
    token.decode_form = token.content;
    if (vocab.by_id_.at(token.id) != i) continue;  // shadowed by a later entry with its id
    if (token.normalized) {
      if (normalizer != nullptr) normalizer->normalize(token.decode_form);
      if (!token.decode_form.empty()) {
        vocab.normalized_trie_.insert(token.decode_form, static_cast<int32_t>(i));
      }
    } else {
      vocab.raw_trie_.insert(token.content, static_cast<int32_t>(i));
    }
  }
  if (any_single_word) {
    // Rust regex's Unicode \w (HF's word test), wider than PCRE2's \w.
    auto regex = Regex::compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])");
    if (!regex.ok()) return errorf("{}: {}", path, regex.message());
    vocab.word_char_ = std::move(regex).value();
  }
  return vocab;
}

bool AddedVocabulary::is_word_char_at(std::string_view text, size_t pos) const {
  size_t end = pos;
  next_code_point(text, end);
  const auto hits = word_char_->find_all(text.substr(pos, end - pos));
  return !hits.empty();
}

bool AddedVocabulary::is_word_char_before(std::string_view text, size_t pos) const {
  size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return is_word_char_at(text, start);
}

void AddedVocabulary::split(std::string_view text, bool at_start, std::span<const TextRange> plain,
                            const TokenTrie& trie, std::vector<Segment>& out) const {
  if (text.empty()) return;
  auto add_text = [&](size_t start, size_t end) {
    if (end > start) {
      out.push_back({std::string(text.substr(start, end - start)), -1, at_start && start == 0,
                     slice_ranges(plain, start, end)});
    }
  };
  if (trie.empty()) {
    add_text(0, text.size());
    return;
  }
  size_t done = 0;  // text before this offset is already in `out`
  size_t pos = 0;
  while (pos < text.size()) {
    // Special tokens may not touch plain text: there the vocabulary acts as
    // if they did not exist, which is what HF's split_special_tokens=True
    // does. A special token wholly outside still matches next to it.
    const auto match = trie.longest_match_if(text, pos, [&](size_t length, int32_t index) {
      return !tokens_[index].special || !overlaps_any(plain, pos, pos + length);
    });
    if (!match) {
      ++pos;  // patterns are valid UTF-8, so they never match mid-character
      continue;
    }
    size_t start = pos, stop = pos + match->first;
    pos = stop;
    const AddedToken& token = tokens_[match->second];
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char_before(text, start);
      const bool space_after = stop == text.size() || !is_word_char_at(text, stop);
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {  // swallow the whitespace before, not what is already out
      size_t new_start = start;
      while (new_start > done) {
        size_t prev = new_start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t at = prev;
        if (!is_unicode_whitespace(next_code_point(text, at))) break;
        new_start = prev;
      }
      start = new_start;
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t next = stop;
        if (!is_unicode_whitespace(next_code_point(text, next))) break;
        stop = next;
      }
      // HF resumes matching inside the stripped whitespace, which only a
      // token starting with whitespace could use; we resume after it.
      pos = stop;
    }
    add_text(done, start);
    out.push_back(
        {std::string(text.substr(start, stop - start)), token.id, at_start && start == 0, {}});
    done = stop;
  }
  add_text(done, text.size());
}

std::vector<Segment> AddedVocabulary::split_raw(std::string_view text,
                                                std::span<const TextRange> plain) const {
  std::vector<Segment> out;
  split(text, /*at_start=*/true, plain, raw_trie_, out);
  return out;
}

void AddedVocabulary::split_normalized(Segment piece, std::vector<Segment>& out) const {
  if (normalized_trie_.empty()) {
    if (!piece.text.empty()) out.push_back(std::move(piece));
    return;
  }
  const TextRanges plain = std::move(piece.plain);
  split(piece.text, piece.at_start, plain, normalized_trie_, out);
}

const AddedToken* AddedVocabulary::find_by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

int32_t AddedVocabulary::id_limit() const {
  int32_t limit = 0;
  for (const auto& [id, index] : by_id_) limit = std::max(limit, id + 1);
  return limit;
}

}  // namespace specstack::tok

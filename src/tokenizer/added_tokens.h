// tokenizer.json "added_tokens": tokens matched in the text before the model
// sees it, longest match first, as HF's AddedVocabulary does. Tokens with
// "normalized": false are matched in the raw text; tokens with "normalized":
// true are matched, in their normalized form, in the normalized pieces left
// between the former (so a Prepend normalizer makes TinyStories'
// "<|start_story|>" match only at the start of a piece or after a space).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/text_ranges.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/token_id_map.h"

namespace specstack::tok {

struct AddedToken {
  std::string content;
  // What decode() shows: the normalized content for "normalized" tokens (as
  // HF tokenizers 0.23 does, so TinyStories' "<unk>" decodes as " <unk>").
  std::string decode_form;
  int32_t id = 0;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A piece of text, or an added token that was found in it.
struct Segment {
  std::string text;
  int32_t token_id = -1;  // >= 0: an added token
  bool at_start = false;  // starts at offset 0 of the original text
  TextRanges plain;       // ranges of `text` where special tokens must not match
};

// A byte trie over the patterns for leftmost-longest matching.
class TokenTrie {
 public:
  void insert(std::string_view pattern, int32_t value);
  // Longest pattern that starts at text[pos]: (length, value).
  std::optional<std::pair<size_t, int32_t>> longest_match(std::string_view text, size_t pos) const {
    return longest_match_if(text, pos, [](size_t, int32_t) { return true; });
  }
  // The same among the patterns for which accept(length, value) holds.
  template <typename Accept>
  std::optional<std::pair<size_t, int32_t>> longest_match_if(std::string_view text, size_t pos,
                                                             const Accept& accept) const {
    std::optional<std::pair<size_t, int32_t>> best;
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) break;
      const int32_t value = nodes_[node].value;
      if (value >= 0 && accept(i + 1 - pos, value)) best = std::pair{i + 1 - pos, value};
    }
    return best;
  }
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // byte -> node index
    int32_t value = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;  // -1: none
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

class AddedVocabulary {
 public:
  // normalizer (may be null) gives the matched form of normalized tokens.
  static Result<AddedVocabulary> parse(const Json& added_tokens, const std::string& path,
                                       const Normalizer* normalizer);

  // Step 1: splits raw text on the non-normalized tokens. Inside the `plain`
  // byte ranges (and across their edges) tokens marked special do not match,
  // as with HF's split_special_tokens; the other added tokens still do.
  std::vector<Segment> split_raw(std::string_view text, std::span<const TextRange> plain) const;
  // Step 2: splits one normalized piece on the normalized tokens (appends),
  // honouring piece.plain the same way.
  void split_normalized(Segment piece, std::vector<Segment>& out) const;

  // Whether any token is matched after normalization (split_normalized does work).
  bool has_normalized_tokens() const { return !normalized_trie_.empty(); }
  const AddedToken* find_by_id(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  int32_t id_limit() const;  // max id + 1 (0 if none)

 private:
  void split(std::string_view text, bool at_start, std::span<const TextRange> plain,
             const TokenTrie& trie, std::vector<Segment>& out) const;
  bool is_word_char_at(std::string_view text, size_t pos) const;
  bool is_word_char_before(std::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;  // id -> index in tokens_
  TokenIdMap by_content_;
  TokenTrie raw_trie_;              // value: index in tokens_
  TokenTrie normalized_trie_;       // value: index in tokens_
  std::optional<Regex> word_char_;  // \w, only when some token is single_word
};

}  // namespace specstack::tok

#include "grammar/token_vocabulary.h"

#include <limits>

#include "tokenizer/tokenizer.h"

namespace specstack::grammar {

namespace {

// Longer tokens exist (runs of spaces or dashes) but a grammar rarely admits
// them; the trie depth fits a uint16_t either way.
constexpr size_t kMaxTokenBytes = std::numeric_limits<uint16_t>::max();

}  // namespace

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : n_tokens_(static_cast<int32_t>(token_bytes.size())), bytes_(token_bytes) {
  std::vector<int32_t> ids;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty() && bytes_[id].size() <= kMaxTokenBytes) {
      ids.push_back(static_cast<int32_t>(id));
    }
  }
  trie_ =
      TokenTrie(std::move(ids), [&](int32_t id) -> std::string_view { return bytes_[size_t(id)]; });
}

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.token_bytes(id);
  }
  return TokenVocabulary(bytes);
}

}  // namespace specstack::grammar

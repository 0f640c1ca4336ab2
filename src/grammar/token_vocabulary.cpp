#include "grammar/token_vocabulary.h"

#include <algorithm>
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
  size_t max_length = 0;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty() && bytes_[id].size() <= kMaxTokenBytes) {
      ids.push_back(static_cast<int32_t>(id));
      max_length = std::max(max_length, bytes_[id].size());
    }
  }
  by_length_ = ids;
  std::stable_sort(by_length_.begin(), by_length_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)].size() > bytes_[size_t(b)].size();
  });
  longer_than_.assign(max_length + 1, 0);
  for (size_t n = 0, k = by_length_.size(); n <= max_length; ++n) {
    while (k > 0 && bytes_[size_t(by_length_[k - 1])].size() <= n) --k;
    longer_than_[n] = k;
  }
  trie_ =
      TokenTrie(std::move(ids), [&](int32_t id) -> std::string_view { return bytes_[size_t(id)]; });
}

std::span<const int32_t> TokenVocabulary::longer_than(size_t n) const {
  if (n >= longer_than_.size()) return {};
  return std::span<const int32_t>(by_length_).first(longer_than_[n]);
}

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.token_bytes(id);
  }
  return TokenVocabulary(bytes);
}

}  // namespace specstack::grammar

// TokenVocabulary: the byte string of every token a grammar may produce, and
// their trie (grammar/token_trie.h).
// Special tokens (and tokens with no bytes) are left out: a constrained
// request never produces them; EOS is the engine's business.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/token_trie.h"

namespace specstack {
class Tokenizer;
}

namespace specstack::grammar {

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes of token id; "" leaves the token out.
  explicit TokenVocabulary(const std::vector<std::string>& token_bytes);
  // Every non-special token of the tokenizer.
  static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return n_tokens_; }  // ids are [0, size())
  const TokenTrie& trie() const { return trie_; }
  const std::vector<TrieNode>& nodes() const { return trie_.nodes(); }  // [0] is the root
  const std::vector<int32_t>& token_ids() const { return trie_.token_ids(); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  size_t max_depth() const { return trie_.max_depth(); }
  // The ids of the trie's tokens longer than `n` bytes.
  std::span<const int32_t> longer_than(size_t n) const;

 private:
  int32_t n_tokens_ = 0;
  std::vector<std::string> bytes_;  // [size()]
  TokenTrie trie_;
  std::vector<int32_t> by_length_;   // the trie's ids, longest first
  std::vector<size_t> longer_than_;  // [n]: how many of by_length_ are longer than n bytes
};

}  // namespace specstack::grammar

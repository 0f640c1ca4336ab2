// TokenVocabulary: the byte string of every token a grammar may produce, as a
// trie stored in depth-first preorder, so that a mask walk visits a node
// after its parent and skips a rejected node's whole subtree in one jump.
// Special tokens (and tokens with no bytes) are left out: a constrained
// request never produces them; EOS is the engine's business.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specstack {
class Tokenizer;
}

namespace specstack::grammar {

struct TrieNode {
  uint8_t byte = 0;
  uint16_t depth = 0;         // 1 for a token's first byte
  uint32_t subtree_end = 0;   // index just past this node's subtree
  uint32_t tokens_begin = 0;  // TokenVocabulary::token_ids_ of tokens ending here
  uint32_t tokens_end = 0;
};

class TokenVocabulary {
 public:
  // token_bytes[id]: the bytes of token id; "" leaves the token out.
  explicit TokenVocabulary(const std::vector<std::string>& token_bytes);
  // Every non-special token of the tokenizer.
  static TokenVocabulary from_tokenizer(const Tokenizer& tokenizer);

  int32_t size() const { return n_tokens_; }                     // ids are [0, size())
  const std::vector<TrieNode>& nodes() const { return nodes_; }  // [0] is the root
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  size_t max_depth() const { return max_depth_; }

 private:
  int32_t n_tokens_ = 0;
  std::vector<std::string> bytes_;  // [size()]
  std::vector<TrieNode> nodes_;
  std::vector<int32_t> token_ids_;
  size_t max_depth_ = 0;
};

}  // namespace specstack::grammar

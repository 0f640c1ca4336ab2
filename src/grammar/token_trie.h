// TokenTrie: the byte strings of a set of tokens as a trie stored in
// depth-first preorder, so that a mask walk visits a node after its parent
// and skips a rejected node's whole subtree in one jump. The whole
// vocabulary has one (TokenVocabulary); the context-dependent tokens of a
// grammar position have a small one each (TokenConstraint).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace specstack::grammar {

struct TrieNode {
  uint8_t byte = 0;
  uint16_t depth = 0;         // 1 for a token's first byte
  uint16_t deepest = 0;       // the longest token in this node's subtree, in bytes
  uint32_t subtree_end = 0;   // index just past this node's subtree
  uint32_t tokens_begin = 0;  // TokenTrie::token_ids() of tokens ending here
  uint32_t tokens_end = 0;
};

class TokenTrie {
 public:
  TokenTrie() : nodes_(1) {}
  // The tokens `ids` (none empty, none longer than 65,535 bytes), their bytes
  // given by `bytes_of`.
  TokenTrie(std::vector<int32_t> ids, const std::function<std::string_view(int32_t)>& bytes_of);

  const std::vector<TrieNode>& nodes() const { return nodes_; }  // [0] is the root
  const std::vector<int32_t>& token_ids() const { return token_ids_; }
  size_t max_depth() const { return max_depth_; }
  bool empty() const { return token_ids_.empty(); }

 private:
  std::vector<TrieNode> nodes_;
  std::vector<int32_t> token_ids_;
  size_t max_depth_ = 0;
};

}  // namespace specstack::grammar

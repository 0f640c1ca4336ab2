#include "grammar/token_trie.h"

#include <algorithm>

namespace specstack::grammar {

TokenTrie::TokenTrie(std::vector<int32_t> ids,
                     const std::function<std::string_view(int32_t)>& bytes_of) {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string_view x = bytes_of(a), y = bytes_of(b);
    return x != y ? x < y : a < b;
  });
  // Sorted byte strings are a preorder walk of their trie: each token adds
  // nodes for the bytes past its common prefix with the previous one.
  nodes_.push_back(TrieNode{});
  std::vector<uint32_t> path = {0};  // node index per depth
  std::string_view previous;
  bool first = true;
  for (int32_t id : ids) {
    const std::string_view s = bytes_of(id);
    size_t common = 0;
    if (!first) {
      const size_t n = std::min(previous.size(), s.size());
      while (common < n && previous[common] == s[common]) ++common;
    }
    // Close the nodes deeper than the common prefix.
    while (path.size() > common + 1) {
      nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back(node);
    }
    max_depth_ = std::max(max_depth_, s.size());
    // Identical byte strings are adjacent and share the node.
    TrieNode& leaf = nodes_[path.back()];
    if (leaf.tokens_end == 0) leaf.tokens_begin = static_cast<uint32_t>(token_ids_.size());
    token_ids_.push_back(id);
    leaf.tokens_end = static_cast<uint32_t>(token_ids_.size());
    previous = s;
    first = false;
  }
  while (!path.empty()) {
    nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  // Every leaf ends a token, so a subtree's longest token is its deepest
  // node: children (later in preorder) are done before their parent.
  for (size_t i = nodes_.size(); i-- > 0;) {
    TrieNode& node = nodes_[i];
    node.deepest = node.depth;
    for (uint32_t c = static_cast<uint32_t>(i) + 1; c < node.subtree_end;
         c = nodes_[c].subtree_end) {
      node.deepest = std::max(node.deepest, nodes_[c].deepest);
    }
  }
}

}  // namespace specstack::grammar

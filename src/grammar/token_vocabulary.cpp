#include "grammar/token_vocabulary.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace specstack::grammar {

namespace {

// Longer tokens exist (runs of spaces or dashes) but a grammar rarely admits
// them; the trie depth fits a uint16_t either way.
constexpr size_t kMaxTokenBytes = std::numeric_limits<uint16_t>::max();

}  // namespace

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes)
    : n_tokens_(static_cast<int32_t>(token_bytes.size())), bytes_(token_bytes) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty() && bytes_[id].size() <= kMaxTokenBytes) {
      order.push_back(static_cast<int32_t>(id));
    }
  }
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return bytes_[size_t(a)] < bytes_[size_t(b)]; });

  // Sorted byte strings are a preorder walk of their trie: each token adds
  // nodes for the bytes past its common prefix with the previous one.
  nodes_.push_back(TrieNode{});
  std::vector<uint32_t> path = {0};  // node index per depth
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[size_t(id)];
    size_t common = 0;
    if (previous != nullptr) {
      const size_t n = std::min(previous->size(), s.size());
      while (common < n && (*previous)[common] == s[common]) ++common;
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
    previous = &s;
  }
  while (!path.empty()) {
    nodes_[path.back()].subtree_end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
}

TokenVocabulary TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.token_bytes(id);
  }
  return TokenVocabulary(bytes);
}

}  // namespace specstack::grammar

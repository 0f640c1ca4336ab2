#include "grammar/trie_walk.h"

#include <algorithm>
#include <bit>

namespace specstack::grammar {

int64_t TokenMask::count() const {
  int64_t n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

int64_t walk_trie(const Grammar& g, const TokenTrie& trie, const StackSet& state, TokenMask& mask,
                  WalkScratch& scratch, size_t longer_than) {
  const std::vector<TrieNode>& nodes = trie.nodes();
  const std::vector<int32_t>& ids = trie.token_ids();
  // states[d]: the state after the first d bytes of the current path;
  // allowed[d]: the bytes it admits (a cheap test before a full advance).
  scratch.states.resize(trie.max_depth() + 1);
  scratch.allowed.resize(trie.max_depth() + 1);
  scratch.states[0] = state;
  scratch.allowed[0] = GrammarMatcher::next_bytes(g, state);
  int64_t visited = 0;
  for (uint32_t i = 1; i < nodes.size();) {
    const TrieNode& node = nodes[i];
    const size_t d = node.depth;
    ++visited;
    if (node.deepest <= longer_than || !scratch.allowed[d - 1].test(node.byte)) {
      i = node.subtree_end;
      continue;
    }
    GrammarMatcher::advance(g, scratch.states[d - 1], node.byte, scratch.states[d], scratch.stack);
    if (scratch.states[d].empty()) {
      i = node.subtree_end;
      continue;
    }
    for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) mask.set(ids[t]);
    if (node.subtree_end > i + 1) {
      scratch.allowed[d] = GrammarMatcher::next_bytes(g, scratch.states[d]);
    }
    ++i;
  }
  return visited;
}

PositionMasks classify_position(const Grammar& g, const TokenVocabulary& vocabulary,
                                std::span<const uint32_t> suffix, WalkScratch& scratch,
                                size_t longer_than) {
  const TokenTrie& trie = vocabulary.trie();
  const std::vector<TrieNode>& nodes = trie.nodes();
  const std::vector<int32_t>& ids = trie.token_ids();
  PositionMasks out;
  out.accepted.words.assign((static_cast<size_t>(vocabulary.size()) + 63) / 64, 0);
  std::vector<int32_t> dependent;
  auto all_dependent = [&](uint32_t begin, uint32_t end) {
    for (uint32_t n = begin; n < end; ++n) {
      if (nodes[n].depth <= longer_than) continue;
      for (uint32_t t = nodes[n].tokens_begin; t < nodes[n].tokens_end; ++t) {
        dependent.push_back(ids[t]);
      }
    }
  };
  // popped[d]: some path returned from the rule within the first d bytes:
  // from there on, the rest of a token is the context's to judge.
  std::vector<uint8_t> popped(trie.max_depth() + 1, 0);
  scratch.states.resize(trie.max_depth() + 1);
  scratch.allowed.resize(trie.max_depth() + 1);
  scratch.states[0].clear();
  scratch.states[0].data.assign(suffix.begin(), suffix.end());
  scratch.states[0].ends.push_back(static_cast<uint32_t>(suffix.size()));
  scratch.states[0].hashes.push_back(0);
  scratch.allowed[0] = GrammarMatcher::next_bytes(g, scratch.states[0]);
  for (uint32_t i = 1; i < nodes.size();) {
    const TrieNode& node = nodes[i];
    if (node.deepest <= longer_than) {
      i = node.subtree_end;  // only short tokens below: left out
      continue;
    }
    const size_t d = node.depth;
    ++out.nodes_visited;
    const StackSet& before = scratch.states[d - 1];
    StackSet& after = scratch.states[d];
    if (scratch.allowed[d - 1].test(node.byte)) {
      GrammarMatcher::advance(g, before, node.byte, after, scratch.stack);
    } else {
      after.clear();
    }
    if (after.empty()) {
      // No path inside the rule takes this byte: rejected, unless a path
      // returned from the rule earlier (then the context decides).
      if (popped[d - 1]) all_dependent(i, node.subtree_end);
      i = node.subtree_end;
      continue;
    }
    bool returned = popped[d - 1] != 0;
    for (size_t s = 0; s < after.size(); ++s) {
      const size_t size = after.ends[s] - after.begin(s);
      returned = returned || size == 0;
      if (size > suffix.size()) out.max_growth = std::max(out.max_growth, size - suffix.size());
    }
    popped[d] = returned ? 1 : 0;
    for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) out.accepted.set(ids[t]);
    if (node.subtree_end > i + 1) {
      // Below a return every byte may continue (in the context), so every
      // child is visited; inside the rule only the admitted ones.
      scratch.allowed[d] = returned ? ByteSet().set() : GrammarMatcher::next_bytes(g, after);
    }
    ++i;
  }
  out.context_dependent = TokenTrie(
      std::move(dependent), [&](int32_t id) -> std::string_view { return vocabulary.bytes(id); });
  return out;
}

}  // namespace specstack::grammar

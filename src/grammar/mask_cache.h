// MaskCache: the per-state token masks of one TokenConstraint, bounded in
// bytes, evicting by GreedyDual (Young; Cao and Irani's GreedyDual-Size with
// the sizes equal): cost-aware LRU.
//
// Why not LRU or clear-when-full: the masks differ wildly in what they cost
// to make again. A state whose tops are classified is a union of bit sets
// (a few us); a state within a token's length of a counted repetition's
// maximum walks most of the vocabulary trie (hundreds of us to ms). A long
// document (a 1000-character string) makes more cheap states, each met once
// per document, than the cache holds: cleared when full (what this
// replaces) or plain LRU, they push out the expensive states that every
// document meets again (docs/benchmarks.md, session 24).
//
// GreedyDual: each entry carries its cost (the work its computation did,
// TokenConstraint's count of trie nodes and mask words; never a time, so
// the policy is deterministic) and a priority L + cost, where L (the
// "inflation") is the priority of the last entry evicted. The entry of
// lowest priority goes first (ties: the least recently used). A hit sets
// the priority to L + cost again. So among entries used equally recently
// the cheap one goes first, and an expensive entry nobody uses is aged out
// as L rises past it; with equal costs this is LRU. O(log n) per hit,
// insert and eviction (an ordered index of (priority, last use)).
//
// Masks never depend on the cache: a mask is a function of the parser state
// only (grammar/token_constraint.h), the cache decides only which ones are
// computed again (tests/grammar/mask_cache_test.cpp compares masks made
// with no cache, a tiny one and an unbounded one).
//
// Not thread-safe: TokenConstraint calls it under its own lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>

#include "grammar/trie_walk.h"

namespace specstack::grammar {

struct MaskCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  size_t entries = 0;
  size_t bytes = 0;  // as counted by MaskCache::entry_bytes
};

class MaskCache {
 public:
  // At most `max_bytes` of entries (entry_bytes); 0 caches nothing.
  explicit MaskCache(size_t max_bytes);

  // The mask cached for `key` (a StackSet::key), null when none; a hit
  // counts as a use.
  std::shared_ptr<const TokenMask> find(const std::string& key);
  // Caches `mask` (replacing one already under `key`), evicting as needed.
  // `cost`: what computing it again would cost, in any unit that is the same
  // for every entry. A mask larger than the whole cache is not kept.
  void insert(std::string key, std::shared_ptr<const TokenMask> mask, uint64_t cost);

  // What one entry counts for: the mask's words, the key and the index
  // nodes around them (an estimate of the allocator's bytes).
  static size_t entry_bytes(const std::string& key, const TokenMask& mask);

  size_t max_bytes() const { return max_bytes_; }
  const MaskCacheStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::shared_ptr<const TokenMask> mask;
    uint64_t cost = 0;
    uint64_t priority = 0;
    uint64_t last_use = 0;  // unique: orders ties, and makes Order keys unique
    size_t bytes = 0;
  };
  using Order = std::pair<uint64_t, uint64_t>;  // (priority, last_use)

  void evict_one();

  size_t max_bytes_;
  uint64_t inflation_ = 0;  // L: the priority of the last entry evicted
  uint64_t clock_ = 0;      // uses so far
  // Keys live in the map's nodes, which never move (rehashing keeps
  // references valid), so the index points at them.
  std::unordered_map<std::string, Entry> entries_;
  std::map<Order, const std::string*> order_;  // lowest priority first
  MaskCacheStats stats_;
};

}  // namespace specstack::grammar

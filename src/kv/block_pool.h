// BlockPool: the physical KV blocks of one model, with reference counts and
// the prefix cache. Free blocks wait in a queue (allocate <- head): a freed
// block that caches nothing goes to the head, a cached one to the tail, so
// uncached blocks are always reused first and cached ones leave in LRU
// order. A full block registered under its prefix hash stays findable
// after its last reference is dropped, until allocate() hands it out again:
// that is the eviction, and it happens in least-recently-freed order.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"
#include "kv/free_block_queue.h"

namespace specstack {

// Cumulative counters for /metrics.
struct PrefixCacheStats {
  int64_t n_query_tokens = 0;  // prompt tokens looked up
  int64_t n_hit_tokens = 0;    // of those, found in the cache
  int64_t n_evictions = 0;     // cached blocks reused for other content
};

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return n_blocks_; }
  // Blocks nobody holds, cached ones included (they are reclaimable).
  int32_t n_free() const { return free_queue_.size(); }
  int32_t n_used() const { return n_blocks_ - n_free(); }
  // Blocks registered in the prefix cache, held or not.
  int32_t n_cached() const { return static_cast<int32_t>(hash_to_block_.size()); }
  bool can_allocate(int32_t count) const { return count <= n_free(); }

  // Hands out the head of the free queue with one reference, evicting its
  // cache entry if it had one. nullopt when every block is held: an ordinary
  // outcome that drives back-pressure. A fresh pool hands out 0, 1, 2, ...
  std::optional<int32_t> allocate();
  // Drops one reference; at zero a cached block joins the tail of the free
  // queue (still findable), an uncached one its head. Freeing an unheld block is a check failure.
  void free(int32_t block);
  // Takes one more reference to a held or cached block (prefix hit, fork); a
  // cached block nobody held leaves the free queue.
  void touch(int32_t block);

  int32_t ref_count(int32_t block) const { return meta(block).ref_count; }
  std::optional<uint64_t> block_hash(int32_t block) const;

  // The cached block registered under `hash` whose stored content equals
  // `content` (a hash match alone is not a hit).
  std::optional<int32_t> find_cached(uint64_t hash, const BlockContent& content) const;
  // Publishes a held, full, not yet cached block. Returns false and changes
  // nothing when `hash` already names a block: each content is cached once.
  bool register_cached(int32_t block, uint64_t hash, const BlockContent& content);

  void record_prefix_query(int64_t n_query_tokens, int64_t n_hit_tokens);
  const PrefixCacheStats& prefix_stats() const { return stats_; }
  // Free queue head to tail; O(n), for tests and debugging.
  std::vector<int32_t> free_queue() const { return free_queue_.to_vector(); }

 private:
  struct BlockMeta {
    int32_t ref_count = 0;
    bool cached = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;  // with extra_key and tokens: what a hit must match
    uint64_t extra_key = 0;
    std::vector<int32_t> tokens;  // [block_size] when cached, else empty
  };

  const BlockMeta& meta(int32_t block) const;
  BlockMeta& meta(int32_t block);
  void evict(int32_t block);

  int32_t n_blocks_;
  std::vector<BlockMeta> blocks_;  // [n_blocks]
  FreeBlockQueue free_queue_;
  std::unordered_map<uint64_t, int32_t> hash_to_block_;
  PrefixCacheStats stats_;
};

}  // namespace specstack

#include "kv/block_pool.h"

#include <algorithm>

#include "base/check.h"

namespace specstack {

BlockPool::BlockPool(int32_t n_blocks)
    : n_blocks_(n_blocks), blocks_(static_cast<size_t>(n_blocks)), free_queue_(n_blocks) {}

const BlockPool::BlockMeta& BlockPool::meta(int32_t block) const {
  SS_CHECK_LE(0, block);
  SS_CHECK_LT(block, n_blocks_);
  return blocks_[static_cast<size_t>(block)];
}

BlockPool::BlockMeta& BlockPool::meta(int32_t block) {
  SS_CHECK_LE(0, block);
  SS_CHECK_LT(block, n_blocks_);
  return blocks_[static_cast<size_t>(block)];
}

std::optional<int32_t> BlockPool::allocate() {
  const std::optional<int32_t> block = free_queue_.pop_front();
  if (!block) return std::nullopt;
  BlockMeta& m = meta(*block);
  SS_CHECK_EQ(m.ref_count, 0);
  if (m.cached) evict(*block);
  m.ref_count = 1;
  return block;
}

void BlockPool::free(int32_t block) {
  BlockMeta& m = meta(block);
  SS_CHECK_MSG(m.ref_count > 0, "double free of KV block " + std::to_string(block));
  if (--m.ref_count != 0) return;
  // A block that caches nothing is worth nothing once free: it is reused
  // before any cached block, so freeing scratch blocks (a rolled-back draft,
  // a sparse draft's dropped window, a partial last block) never pushes a
  // cached prefix closer to eviction. Cached blocks queue in LRU order.
  if (m.cached) {
    free_queue_.push_back(block);
  } else {
    free_queue_.push_front(block);
  }
}

void BlockPool::touch(int32_t block) {
  BlockMeta& m = meta(block);
  if (m.ref_count == 0) {
    // An unheld block that is not cached holds garbage: touching it is a bug.
    SS_CHECK_MSG(m.cached, "touch of a free, uncached KV block " + std::to_string(block));
    free_queue_.remove(block);
  }
  ++m.ref_count;
}

std::optional<uint64_t> BlockPool::block_hash(int32_t block) const {
  const BlockMeta& m = meta(block);
  if (!m.cached) return std::nullopt;
  return m.hash;
}

std::optional<int32_t> BlockPool::find_cached(uint64_t hash, const BlockContent& content) const {
  const auto it = hash_to_block_.find(hash);
  if (it == hash_to_block_.end()) return std::nullopt;
  const BlockMeta& m = meta(it->second);
  const bool same =
      m.parent_hash == content.parent_hash && m.extra_key == content.extra_key &&
      std::equal(m.tokens.begin(), m.tokens.end(), content.tokens.begin(), content.tokens.end());
  if (!same) return std::nullopt;  // a 64-bit hash collision
  return it->second;
}

bool BlockPool::register_cached(int32_t block, uint64_t hash, const BlockContent& content) {
  BlockMeta& m = meta(block);
  SS_CHECK_MSG(m.ref_count > 0, "publishing an unheld KV block");
  SS_CHECK_MSG(!m.cached, "KV block published twice");
  if (hash_to_block_.contains(hash)) return false;
  hash_to_block_.emplace(hash, block);
  m.cached = true;
  m.hash = hash;
  m.parent_hash = content.parent_hash;
  m.extra_key = content.extra_key;
  m.tokens.assign(content.tokens.begin(), content.tokens.end());
  return true;
}

void BlockPool::evict(int32_t block) {
  BlockMeta& m = meta(block);
  const size_t erased = hash_to_block_.erase(m.hash);
  SS_CHECK_EQ(erased, size_t{1});
  m.cached = false;
  m.tokens.clear();
  ++stats_.n_evictions;
}

void BlockPool::record_prefix_query(int64_t n_query_tokens, int64_t n_hit_tokens) {
  SS_CHECK_LE(n_hit_tokens, n_query_tokens);
  stats_.n_query_tokens += n_query_tokens;
  stats_.n_hit_tokens += n_hit_tokens;
}

}  // namespace specstack

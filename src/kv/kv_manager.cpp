#include "kv/kv_manager.h"

#include <algorithm>

#include "base/check.h"

namespace specstack {

KvManager::KvManager(KvCache& cache)
    : cache_(cache),
      block_size_(cache.shape().block_size),
      pool_(static_cast<int32_t>(cache.shape().n_blocks)) {
  SS_CHECK_GT(block_size_, 0);
}

CachedPrefix KvManager::find_cached_prefix(std::span<const int32_t> tokens, uint64_t extra_key) {
  CachedPrefix prefix;
  prefix.extra_key = extra_key;
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t max_blocks = n_tokens == 0 ? 0 : (n_tokens - 1) / block_size_;
  uint64_t parent = kRootBlockHash;
  for (int64_t i = 0; i < max_blocks; ++i) {
    const BlockContent content{
        parent, extra_key,
        tokens.subspan(static_cast<size_t>(i * block_size_), static_cast<size_t>(block_size_))};
    const uint64_t hash = hash_block(content);
    const std::optional<int32_t> block = pool_.find_cached(hash, content);
    if (!block) break;
    prefix.blocks.push_back(*block);
    prefix.block_hashes.push_back(hash);
    parent = hash;
  }
  prefix.n_tokens = static_cast<int32_t>(static_cast<int64_t>(prefix.blocks.size()) * block_size_);
  pool_.record_prefix_query(n_tokens, prefix.n_tokens);
  return prefix;
}

bool KvManager::can_allocate(const KvSequence& seq, const CachedPrefix& prefix,
                             int32_t n_new_tokens) const {
  SS_CHECK_EQ(seq.n_slots(), 0);
  SS_CHECK_GE(n_new_tokens, 0);
  // Prefix blocks nobody holds sit in the free queue: touching them takes
  // them out of it, so they compete with the new blocks for free capacity.
  const auto n_prefix_unheld = static_cast<int32_t>(
      std::count_if(prefix.blocks.begin(), prefix.blocks.end(),
                    [&](int32_t block) { return pool_.ref_count(block) == 0; }));
  const int64_t n_total_blocks = (prefix.n_tokens + n_new_tokens + block_size_ - 1) / block_size_;
  const int64_t n_new_blocks = n_total_blocks - static_cast<int64_t>(prefix.blocks.size());
  return n_new_blocks + n_prefix_unheld <= pool_.n_free();
}

int32_t KvManager::allocate(KvSequence& seq, const CachedPrefix& prefix, int32_t n_new_tokens) {
  SS_CHECK_MSG(can_allocate(seq, prefix, n_new_tokens), "allocate without can_allocate");
  SS_CHECK_MSG(prefix.blocks.empty() || prefix.extra_key == seq.options_.extra_key,
               "CachedPrefix looked up under another extra key");
  SS_CHECK_EQ(prefix.blocks.size(), prefix.block_hashes.size());
  // Touch before allocating: a fresh allocation could otherwise evict a
  // prefix block that is waiting in the free queue.
  for (size_t i = 0; i < prefix.blocks.size(); ++i) {
    SS_CHECK_MSG(pool_.block_hash(prefix.blocks[i]) == prefix.block_hashes[i],
                 "stale CachedPrefix: a block was evicted since find_cached_prefix");
    pool_.touch(prefix.blocks[i]);
  }
  seq.table_.append_filled_blocks(prefix.blocks);
  seq.block_hashes_ = prefix.block_hashes;
  return seq.table_.append(n_new_tokens, pool_);
}

bool KvManager::needs_copy_on_write(const KvSequence& seq, int32_t n_new_tokens) const {
  // Only the partly filled last block is ever written in place. A published
  // block (possible after a rollback) must keep its cached content too.
  if (n_new_tokens == 0 || !seq.table_.last_block_partial()) return false;
  const int32_t last = seq.blocks().back();
  return pool_.ref_count(last) > 1 || pool_.block_hash(last).has_value();
}

bool KvManager::can_append(const KvSequence& seq, int32_t n_new_tokens) const {
  SS_CHECK_GE(n_new_tokens, 0);
  const int32_t n_copies = needs_copy_on_write(seq, n_new_tokens) ? 1 : 0;
  return pool_.can_allocate(seq.table_.blocks_needed(n_new_tokens) + n_copies);
}

int32_t KvManager::append(KvSequence& seq, int32_t n_new_tokens) {
  SS_CHECK_MSG(can_append(seq, n_new_tokens), "append without can_append");
  if (needs_copy_on_write(seq, n_new_tokens)) {
    const size_t index = seq.blocks().size() - 1;
    const int32_t shared = seq.blocks()[index];
    const int32_t copy = *pool_.allocate();
    cache_.copy_block(shared, copy);
    seq.table_.replace_block(index, copy);
    pool_.free(shared);
  }
  return seq.table_.append(n_new_tokens, pool_);
}

int32_t KvManager::publish(KvSequence& seq, std::span<const int32_t> tokens) {
  if (!seq.options_.publishable) return 0;
  SS_CHECK_LE(static_cast<int64_t>(tokens.size()), static_cast<int64_t>(seq.n_slots()));
  const auto n_full = static_cast<size_t>(static_cast<int64_t>(tokens.size()) / block_size_);
  int32_t n_registered = 0;
  for (size_t i = seq.block_hashes_.size(); i < n_full; ++i) {
    const uint64_t parent = i == 0 ? kRootBlockHash : seq.block_hashes_[i - 1];
    const BlockContent content{
        parent, seq.options_.extra_key,
        tokens.subspan(i * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_))};
    const uint64_t hash = hash_block(content);
    const int32_t block = seq.blocks()[i];
    if (const std::optional<uint64_t> existing = pool_.block_hash(block)) {
      // Shared with a fork that published it first: same slots, same tokens.
      SS_CHECK_MSG(*existing == hash, "publish: tokens differ from the block's cached content");
    } else if (pool_.register_cached(block, hash, content)) {
      ++n_registered;
    }
    // else another block already caches this content; this one stays private.
    seq.block_hashes_.push_back(hash);
  }
  return n_registered;
}

KvSequence KvManager::fork(const KvSequence& seq) {
  KvSequence child(block_size_, seq.options_);
  child.table_ = seq.table_;
  child.block_hashes_ = seq.block_hashes_;
  for (int32_t block : child.blocks()) pool_.touch(block);
  return child;
}

void KvManager::free(KvSequence& seq) {
  seq.table_.release(pool_);
  seq.block_hashes_.clear();
}

void KvManager::rollback(KvSequence& seq, int32_t n_tokens) {
  SS_CHECK_LE(0, n_tokens);
  SS_CHECK_LE(n_tokens, seq.n_slots());
  for (int32_t block : seq.table_.truncate(seq.n_slots() - n_tokens)) pool_.free(block);
  const auto n_full = static_cast<size_t>(seq.table_.n_full_blocks());
  if (seq.block_hashes_.size() > n_full) seq.block_hashes_.resize(n_full);
}

void KvManager::drop_blocks(KvSequence& seq, int32_t first, int32_t n) {
  if (n == 0) return;
  for (int32_t block : seq.table_.remove_blocks(first, n)) pool_.free(block);
  seq.options_.publishable = false;
  if (seq.block_hashes_.size() > static_cast<size_t>(first)) {
    seq.block_hashes_.resize(static_cast<size_t>(first));
  }
}

}  // namespace specstack

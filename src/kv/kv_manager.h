// KvManager: per-sequence KV block management on top of one model's BlockPool
// and KvCache: prefix-cache lookup and reuse, publishing full blocks, forks
// that share blocks, copy-on-write of a shared partial block, release and
// rollback. Every growth verb comes as a check-then-act pair, so running out
// of blocks is a return value the scheduler turns into preemption.
//
// Lifecycle of a request:
//   prefix = find_cached_prefix(prompt, key)    // counts the query
//   if (can_allocate(seq, prefix, n)) allocate(seq, prefix, n)
//   ... compute KV for the reserved slots, then publish(seq, computed tokens)
//   if (can_append(seq, 1)) append(seq, 1) ...   // decode / next chunk
//   free(seq)
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_cache.h"

namespace specstack {

// Full cached blocks covering the start of a prompt, from find_cached_prefix.
// Use it for the sequence's first allocate before any other allocation.
struct CachedPrefix {
  int32_t n_tokens = 0;  // blocks.size() * block_size
  uint64_t extra_key = 0;
  std::vector<int32_t> blocks;         // physical ids in logical order
  std::vector<uint64_t> block_hashes;  // chained hash of each block
};

struct KvSequenceOptions {
  // Separates hash spaces: a different model, adapter or KV layout must never
  // hit dense token blocks of another.
  uint64_t extra_key = 0;
  // False for KV that is not the dense prompt (a speculative-prefill sparse
  // selection): such blocks are never published under token hashes.
  bool publishable = true;
};

// One sequence's KV state. The caller owns it; only KvManager changes it.
// Move-only: a copy would hold blocks without references (use fork).
class KvSequence {
 public:
  KvSequence(int64_t block_size, const KvSequenceOptions& options)
      : table_(block_size), options_(options) {}
  KvSequence(KvSequence&&) = default;
  KvSequence& operator=(KvSequence&&) = default;
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  const BlockTable& table() const { return table_; }
  const std::vector<int32_t>& blocks() const { return table_.blocks(); }
  int32_t n_slots() const { return table_.n_slots(); }
  const KvSequenceOptions& options() const { return options_; }
  // Chained hashes of the leading full blocks known so far (hit or published).
  const std::vector<uint64_t>& block_hashes() const { return block_hashes_; }

 private:
  friend class KvManager;
  BlockTable table_;
  KvSequenceOptions options_;
  std::vector<uint64_t> block_hashes_;
};

class KvManager {
 public:
  // The pool has one block per KvCache block.
  explicit KvManager(KvCache& cache);

  const BlockPool& pool() const { return pool_; }
  int64_t block_size() const { return block_size_; }
  KvSequence new_sequence(const KvSequenceOptions& options = {}) const {
    return KvSequence(block_size_, options);
  }

  // Longest chain of cached full blocks starting the prompt. Leaves at least
  // one token to compute (the model needs logits for the last prompt token),
  // so it covers at most (len - 1) / block_size blocks.
  CachedPrefix find_cached_prefix(std::span<const int32_t> tokens, uint64_t extra_key);

  // First allocation of an empty sequence: reuses the prefix blocks and
  // reserves n_new_tokens slots after them. allocate returns the first new
  // slot (= prefix.n_tokens).
  bool can_allocate(const KvSequence& seq, const CachedPrefix& prefix, int32_t n_new_tokens) const;
  int32_t allocate(KvSequence& seq, const CachedPrefix& prefix, int32_t n_new_tokens);

  // Reserves n_new_tokens more slots; the first write into a shared or
  // published partial last block gets a private copy of it first (counted by
  // can_append). append returns the first new slot.
  bool can_append(const KvSequence& seq, int32_t n_new_tokens) const;
  int32_t append(KvSequence& seq, int32_t n_new_tokens);

  // Registers every newly completed full block; `tokens` are the sequence's
  // tokens whose KV is written (at most n_slots). No-op for a non-publishable
  // sequence. Returns the number of blocks newly registered.
  int32_t publish(KvSequence& seq, std::span<const int32_t> tokens);

  // A new sequence sharing every block of seq (n > 1 sampling).
  KvSequence fork(const KvSequence& seq);
  // Drops every block reference, last block first.
  void free(KvSequence& seq);
  // Drops the last n_tokens reserved slots (rejected draft tokens, prefill
  // lookahead), releasing blocks that become empty.
  void rollback(KvSequence& seq, int32_t n_tokens);
  // Frees n full blocks starting at logical block `first` and closes the gap
  // (a sparse sink + window draft KV drops what fell out of its window). The
  // sequence no longer holds its dense prefix, so it stops publishing.
  void drop_blocks(KvSequence& seq, int32_t first, int32_t n);

 private:
  bool needs_copy_on_write(const KvSequence& seq, int32_t n_new_tokens) const;

  KvCache& cache_;
  int64_t block_size_;
  BlockPool pool_;
};

}  // namespace specstack

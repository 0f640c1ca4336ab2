// BlockTable: one sequence's logical-to-physical KV block mapping and how many
// slots it has filled. Growing it is check-then-act: can_append / append.
// Sharing, prefix reuse and copy-on-write are KvManager's job; the table only
// records which blocks the sequence holds.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_pool.h"

namespace specstack {

class BlockTable {
 public:
  explicit BlockTable(int64_t block_size) : block_size_(block_size) {}

  const std::vector<int32_t>& blocks() const { return blocks_; }
  int32_t n_slots() const { return n_slots_; }
  int64_t block_size() const { return block_size_; }
  int32_t n_full_blocks() const { return static_cast<int32_t>(n_slots_ / block_size_); }
  // The next slot lands in an existing block (the last one, partly filled).
  bool last_block_partial() const { return n_slots_ % block_size_ != 0; }

  // Blocks needed to hold n_new more slots.
  int32_t blocks_needed(int32_t n_new) const;
  bool can_append(int32_t n_new, const BlockPool& pool) const {
    return pool.can_allocate(blocks_needed(n_new));
  }
  // Reserves n_new slots (allocating blocks) and returns the first new slot.
  // Requires can_append.
  int32_t append(int32_t n_new, BlockPool& pool);
  // Returns every block to the pool, last block first so the prefix blocks,
  // the likeliest to be shared again, are evicted last.
  void release(BlockPool& pool);

  // Adds blocks whose slots are already filled (a cached prefix); every block
  // held so far must be full.
  void append_filled_blocks(std::span<const int32_t> blocks);
  // Points logical block `index` at another physical block (copy-on-write).
  void replace_block(size_t index, int32_t block);
  // Shrinks to n_slots filled slots and returns the blocks that became empty,
  // last block first; the caller drops their references.
  std::vector<int32_t> truncate(int32_t n_slots);
  // Removes n full blocks starting at logical block `first` and closes the
  // gap (later slots move down by n * block_size); returns the removed
  // blocks, last first. The slots keep the RoPE positions they were written
  // with, so attention over what is left stays correct (sparse draft KV).
  std::vector<int32_t> remove_blocks(int32_t first, int32_t n);

 private:
  int64_t block_size_;
  std::vector<int32_t> blocks_;
  int32_t n_slots_ = 0;
};

}  // namespace specstack

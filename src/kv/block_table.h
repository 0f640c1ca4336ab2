// BlockTable: one sequence's logical-to-physical KV block mapping and how many
// slots it has filled. Growing it is check-then-act: can_append / append.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace specstack {

class BlockTable {
 public:
  explicit BlockTable(int64_t block_size) : block_size_(block_size) {}

  const std::vector<int32_t>& blocks() const { return blocks_; }
  int32_t n_slots() const { return n_slots_; }
  int64_t block_size() const { return block_size_; }

  // Blocks needed to hold n_new more slots.
  int32_t blocks_needed(int32_t n_new) const;
  bool can_append(int32_t n_new, const BlockPool& pool) const {
    return pool.can_allocate(blocks_needed(n_new));
  }
  // Reserves n_new slots (allocating blocks) and returns the first new slot.
  // Requires can_append.
  int32_t append(int32_t n_new, BlockPool& pool);
  // Returns every block to the pool.
  void release(BlockPool& pool);

 private:
  int64_t block_size_;
  std::vector<int32_t> blocks_;
  int32_t n_slots_ = 0;
};

}  // namespace specstack

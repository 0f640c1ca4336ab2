#include "kv/block_table.h"

#include "base/check.h"

namespace specstack {

int32_t BlockTable::blocks_needed(int32_t n_new) const {
  const int64_t total = (static_cast<int64_t>(n_slots_) + n_new + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(std::max<int64_t>(0, total - static_cast<int64_t>(blocks_.size())));
}

int32_t BlockTable::append(int32_t n_new, BlockPool& pool) {
  const int32_t needed = blocks_needed(n_new);
  SS_CHECK_MSG(pool.can_allocate(needed), "append without can_append");
  for (int32_t i = 0; i < needed; ++i) blocks_.push_back(*pool.allocate());
  const int32_t first = n_slots_;
  n_slots_ += n_new;
  return first;
}

void BlockTable::release(BlockPool& pool) {
  for (int32_t block : blocks_) pool.free(block);
  blocks_.clear();
  n_slots_ = 0;
}

}  // namespace specstack

#include "kv/block_table.h"

#include <algorithm>

#include "base/check.h"

namespace specstack {

int32_t BlockTable::blocks_needed(int32_t n_new) const {
  const int64_t total = (static_cast<int64_t>(n_slots_) + n_new + block_size_ - 1) / block_size_;
  return static_cast<int32_t>(std::max<int64_t>(0, total - static_cast<int64_t>(blocks_.size())));
}

int32_t BlockTable::append(int32_t n_new, BlockPool& pool) {
  SS_CHECK_GE(n_new, 0);
  const int32_t needed = blocks_needed(n_new);
  SS_CHECK_MSG(pool.can_allocate(needed), "append without can_append");
  for (int32_t i = 0; i < needed; ++i) blocks_.push_back(*pool.allocate());
  const int32_t first = n_slots_;
  n_slots_ += n_new;
  return first;
}

void BlockTable::release(BlockPool& pool) {
  for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) pool.free(*it);
  blocks_.clear();
  n_slots_ = 0;
}

void BlockTable::append_filled_blocks(std::span<const int32_t> blocks) {
  SS_CHECK_EQ(static_cast<int64_t>(n_slots_), static_cast<int64_t>(blocks_.size()) * block_size_);
  blocks_.insert(blocks_.end(), blocks.begin(), blocks.end());
  n_slots_ = static_cast<int32_t>(static_cast<int64_t>(blocks_.size()) * block_size_);
}

void BlockTable::replace_block(size_t index, int32_t block) {
  SS_CHECK_LT(index, blocks_.size());
  blocks_[index] = block;
}

std::vector<int32_t> BlockTable::truncate(int32_t n_slots) {
  SS_CHECK_LE(0, n_slots);
  SS_CHECK_LE(n_slots, n_slots_);
  const auto keep = static_cast<size_t>((n_slots + block_size_ - 1) / block_size_);
  std::vector<int32_t> dropped(
      blocks_.rbegin(), blocks_.rbegin() + static_cast<std::ptrdiff_t>(blocks_.size() - keep));
  blocks_.resize(keep);
  n_slots_ = n_slots;
  return dropped;
}

std::vector<int32_t> BlockTable::remove_blocks(int32_t first, int32_t n) {
  SS_CHECK_LE(0, first);
  SS_CHECK_LE(0, n);
  SS_CHECK_LE(first + n, n_full_blocks());  // only full blocks: the partial tail stays
  const auto begin = blocks_.begin() + first;
  std::vector<int32_t> removed(std::make_reverse_iterator(begin + n),
                               std::make_reverse_iterator(begin));
  blocks_.erase(begin, begin + n);
  n_slots_ -= static_cast<int32_t>(n * block_size_);
  return removed;
}

}  // namespace specstack

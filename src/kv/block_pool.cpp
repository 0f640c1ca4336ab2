#include "kv/block_pool.h"

#include "base/check.h"

namespace specstack {

BlockPool::BlockPool(int32_t n_blocks) : n_blocks_(n_blocks), in_use_(static_cast<size_t>(n_blocks), 0) {
  for (int32_t i = 0; i < n_blocks; ++i) free_.push_back(i);
}

std::optional<int32_t> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t block = free_.front();
  free_.pop_front();
  in_use_[static_cast<size_t>(block)] = 1;
  return block;
}

void BlockPool::free(int32_t block) {
  SS_CHECK_LE(0, block);
  SS_CHECK_LT(block, n_blocks_);
  SS_CHECK_MSG(in_use_[static_cast<size_t>(block)] == 1, "double free of KV block");
  in_use_[static_cast<size_t>(block)] = 0;
  free_.push_back(block);
}

}  // namespace specstack

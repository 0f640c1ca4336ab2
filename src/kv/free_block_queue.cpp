#include "kv/free_block_queue.h"

#include "base/check.h"

namespace specstack {

FreeBlockQueue::FreeBlockQueue(int32_t n_blocks)
    : sentinel_(n_blocks),
      next_(static_cast<size_t>(n_blocks) + 1, kUnlinked),
      prev_(static_cast<size_t>(n_blocks) + 1, kUnlinked) {
  SS_CHECK_GE(n_blocks, 0);
  next_[static_cast<size_t>(sentinel_)] = sentinel_;
  prev_[static_cast<size_t>(sentinel_)] = sentinel_;
  for (int32_t b = 0; b < n_blocks; ++b) push_back(b);
}

bool FreeBlockQueue::contains(int32_t block) const {
  SS_CHECK_LE(0, block);
  SS_CHECK_LT(block, sentinel_);
  return next_[static_cast<size_t>(block)] != kUnlinked;
}

std::optional<int32_t> FreeBlockQueue::pop_front() {
  if (size_ == 0) return std::nullopt;
  const int32_t head = next_[static_cast<size_t>(sentinel_)];
  remove(head);
  return head;
}

void FreeBlockQueue::push_back(int32_t block) {
  link_between(prev_[static_cast<size_t>(sentinel_)], sentinel_, block);
}

void FreeBlockQueue::push_front(int32_t block) {
  link_between(sentinel_, next_[static_cast<size_t>(sentinel_)], block);
}

void FreeBlockQueue::link_between(int32_t before, int32_t after, int32_t block) {
  SS_CHECK_MSG(!contains(block), "block already in the free queue");
  next_[static_cast<size_t>(before)] = block;
  prev_[static_cast<size_t>(block)] = before;
  next_[static_cast<size_t>(block)] = after;
  prev_[static_cast<size_t>(after)] = block;
  ++size_;
}

void FreeBlockQueue::remove(int32_t block) {
  SS_CHECK_MSG(contains(block), "block not in the free queue");
  const auto b = static_cast<size_t>(block);
  next_[static_cast<size_t>(prev_[b])] = next_[b];
  prev_[static_cast<size_t>(next_[b])] = prev_[b];
  next_[b] = kUnlinked;
  prev_[b] = kUnlinked;
  --size_;
}

std::vector<int32_t> FreeBlockQueue::to_vector() const {
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(size_));
  for (int32_t b = next_[static_cast<size_t>(sentinel_)]; b != sentinel_;
       b = next_[static_cast<size_t>(b)]) {
    order.push_back(b);
  }
  return order;
}

}  // namespace specstack

// FreeBlockQueue: the pool's free blocks in eviction order (head = next to
// allocate, tail = the cached block freed most recently; blocks that cache
// nothing go to the head, see BlockPool::free). An intrusive doubly-linked list over
// block ids, so taking a cached block back out of the middle is O(1).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace specstack {

class FreeBlockQueue {
 public:
  // Starts with blocks 0..n_blocks-1 in ascending order.
  explicit FreeBlockQueue(int32_t n_blocks);

  int32_t size() const { return size_; }
  bool contains(int32_t block) const;
  std::optional<int32_t> pop_front();
  void push_back(int32_t block);
  void push_front(int32_t block);
  void remove(int32_t block);
  // Head to tail; O(n), for tests and debugging.
  std::vector<int32_t> to_vector() const;

 private:
  // Links the unlinked `block` between the adjacent `before` and `after`.
  void link_between(int32_t before, int32_t after, int32_t block);

  static constexpr int32_t kUnlinked = -1;
  // Links are indexed by block id; index n_blocks is the sentinel, whose
  // next is the head and prev the tail.
  int32_t sentinel_;
  std::vector<int32_t> next_;  // [n_blocks + 1]
  std::vector<int32_t> prev_;  // [n_blocks + 1]
  int32_t size_ = 0;
};

}  // namespace specstack

// BlockPool: the free list of physical KV blocks. This is the simple pool of
// the engine core (allocate / free); prefix caching and copy-on-write build on
// it in the serving layer.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace specstack {

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  bool can_allocate(int32_t count) const { return count <= n_free(); }

  // Lowest-numbered free block first, so tests can predict ids. nullopt when
  // the pool is empty: an ordinary outcome that drives back-pressure.
  std::optional<int32_t> allocate();
  void free(int32_t block);

 private:
  int32_t n_blocks_;
  std::deque<int32_t> free_;
  std::vector<uint8_t> in_use_;  // [n_blocks] guards against double free
};

}  // namespace specstack

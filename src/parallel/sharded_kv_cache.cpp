#include "parallel/sharded_kv_cache.h"

#include "base/check.h"

namespace specstack {

ShardedKvCache::ShardedKvCache(const KvCacheShape& shape,
                               std::vector<std::unique_ptr<KvCache>> ranks)
    : KvCache(shape, Tensor(), {}), ranks_(std::move(ranks)) {
  SS_CHECK(!ranks_.empty());
  for (const auto& r : ranks_) {
    SS_CHECK_EQ(r->shape().n_blocks, shape.n_blocks);
    SS_CHECK_EQ(r->shape().block_size, shape.block_size);
  }
}

size_t ShardedKvCache::nbytes() const {
  size_t n = 0;
  for (const auto& r : ranks_) n += r->nbytes();
  return n;
}

size_t ShardedKvCache::resident_bytes() const {
  size_t n = 0;
  for (const auto& r : ranks_) n += r->resident_bytes();
  return n;
}

void ShardedKvCache::copy_block(int32_t src, int32_t dst) {
  for (auto& r : ranks_) r->copy_block(src, dst);
}

}  // namespace specstack

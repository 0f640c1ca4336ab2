// ShardedKvCache: the KV cache of a tensor-parallel model. Each rank's cache
// holds that rank's KV heads for every block, under the same block ids, so the
// one BlockPool / KvManager above (prefix caching, copy-on-write, preemption)
// works unchanged: a block id means "this block on every rank". It has no
// layer views of its own (layer() is empty): only TensorParallelModel, which
// hands each rank its cache, reads K/V.
#pragma once

#include <memory>
#include <vector>

#include "kv/kv_cache.h"

namespace specstack {

class ShardedKvCache final : public KvCache {
 public:
  // `shape`: the full model's shape (all KV heads) for reporting; `ranks`: one
  // cache per rank, all with shape.n_blocks and shape.block_size.
  ShardedKvCache(const KvCacheShape& shape, std::vector<std::unique_ptr<KvCache>> ranks);

  int64_t n_ranks() const { return static_cast<int64_t>(ranks_.size()); }
  KvCache& rank(int64_t r) { return *ranks_[static_cast<size_t>(r)]; }

  // Sums over the ranks (replicated KV heads count once per rank holding them).
  size_t nbytes() const override;
  size_t resident_bytes() const override;
  // Copy-on-write of a shared block: the block on every rank.
  void copy_block(int32_t src, int32_t dst) override;

 private:
  std::vector<std::unique_ptr<KvCache>> ranks_;
};

}  // namespace specstack

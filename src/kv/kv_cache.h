// KvCache: the paged K/V storage of one model (every layer), plus the RoPE
// position held in each slot. Blocks are addressed through per-sequence block
// tables; the storage knows nothing about sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_batch.h"
#include "tensor/tensor.h"

namespace specstack {

struct KvCacheShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  KvLayerView& layer(int64_t index) { return layers_[static_cast<size_t>(index)]; }
  const KvLayerView& layer(int64_t index) const { return layers_[static_cast<size_t>(index)]; }
  // Bytes of K/V storage, for start-up reporting and sizing.
  size_t nbytes() const;
  static size_t bytes_per_block(const KvCacheShape& shape);
  // Copies block src into block dst: every layer's K and V and the slot
  // positions (copy-on-write of a shared block).
  void copy_block(int32_t src, int32_t dst);

 private:
  KvCacheShape shape_;
  Tensor positions_;                 // [n_blocks, block_size] i32, shared by every layer
  std::vector<KvLayerView> layers_;  // [n_layers]
};

}  // namespace specstack

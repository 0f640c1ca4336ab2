// KvCache: the paged K/V storage of one model (every layer), plus the RoPE
// position held in each slot. Blocks are addressed through per-sequence block
// tables; the storage knows nothing about sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_batch.h"
#include "base/check.h"
#include "tensor/tensor.h"

namespace specstack {

struct KvCacheShape {
  int64_t n_layers = 0;
  int64_t n_blocks = 0;
  int64_t block_size = 16;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  // Element type of K and V (--kv-dtype): f32, bf16 or f16 on the CPU, whose
  // attention converts rows as it loads them; the GPU cache is bf16.
  DType dtype = DType::kF32;
};

// The K/V element types a host cache can hold.
inline bool kv_dtype_supported(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

// The base class holds host storage of shape.dtype (the CPU backend's cache); a device
// backend derives from it with its own storage (cuda::CudaKvCache) and
// overrides the virtuals.
class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape);
  virtual ~KvCache() = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  virtual Device device() const { return Device::kCpu; }

  const KvCacheShape& shape() const { return shape_; }
  // A cache without layer views of its own (parallel/sharded_kv_cache.h) fails
  // the check instead of reading past the end.
  KvLayerView& layer(int64_t index) {
    SS_CHECK_LT(static_cast<size_t>(index), layers_.size());
    return layers_[static_cast<size_t>(index)];
  }
  const KvLayerView& layer(int64_t index) const {
    SS_CHECK_LT(static_cast<size_t>(index), layers_.size());
    return layers_[static_cast<size_t>(index)];
  }
  // Bytes of K/V storage, for start-up reporting and sizing.
  virtual size_t nbytes() const;
  // Of nbytes(), the bytes in RAM now: the host pool is mapped lazily
  // (tensor/host_memory.h), so pages appear as blocks are first written. A
  // device pool counts as wholly resident.
  virtual size_t resident_bytes() const;
  // Bytes one block takes: K and V of every layer at shape.dtype's size (or
  // `element_bytes` per value: a device cache with its own layout) plus the
  // slot positions.
  static size_t bytes_per_block(const KvCacheShape& shape);
  static size_t bytes_per_block(const KvCacheShape& shape, size_t element_bytes);
  // Copies block src into block dst: every layer's K and V and the slot
  // positions (copy-on-write of a shared block).
  virtual void copy_block(int32_t src, int32_t dst);

 protected:
  // For derived caches that bring their own storage.
  KvCache(const KvCacheShape& shape, Tensor positions, std::vector<KvLayerView> layers)
      : shape_(shape), positions_(std::move(positions)), layers_(std::move(layers)) {}

 private:
  KvCacheShape shape_;
  Tensor positions_;                 // [n_blocks, block_size] i32, shared by every layer
  std::vector<KvLayerView> layers_;  // [n_layers]
};

}  // namespace specstack

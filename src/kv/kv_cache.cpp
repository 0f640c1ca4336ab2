#include "kv/kv_cache.h"

#include <cstring>
#include <string>

#include "base/check.h"
#include "tensor/host_memory.h"

namespace specstack {

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  SS_CHECK_MSG(kv_dtype_supported(shape.dtype),
               std::string("KV cache: unsupported element type ") + dtype_name(shape.dtype));
  positions_ = Tensor::zeros(DType::kI32, {shape.n_blocks, shape.block_size});
  layers_.reserve(static_cast<size_t>(shape.n_layers));
  for (int64_t l = 0; l < shape.n_layers; ++l) {
    KvLayerView layer;
    std::vector<int64_t> dims = {shape.n_blocks, shape.block_size, shape.n_kv_heads,
                                 shape.head_dim};
    layer.k = Tensor::zeros(shape.dtype, dims);
    layer.v = Tensor::zeros(shape.dtype, dims);
    layer.positions = positions_;
    layer.block_size = shape.block_size;
    layer.n_kv_heads = shape.n_kv_heads;
    layer.head_dim = shape.head_dim;
    layers_.push_back(std::move(layer));
  }
}

size_t KvCache::bytes_per_block(const KvCacheShape& shape) {
  return bytes_per_block(shape, dtype_size(shape.dtype));
}

size_t KvCache::bytes_per_block(const KvCacheShape& shape, size_t element_bytes) {
  return static_cast<size_t>(shape.n_layers * 2 * shape.block_size * shape.n_kv_heads *
                             shape.head_dim) *
             element_bytes +
         static_cast<size_t>(shape.block_size) * sizeof(int32_t);
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  SS_CHECK_LE(0, src);
  SS_CHECK_LT(src, shape_.n_blocks);
  SS_CHECK_LE(0, dst);
  SS_CHECK_LT(dst, shape_.n_blocks);
  SS_CHECK_NE(src, dst);
  const int64_t block_values = shape_.block_size * shape_.n_kv_heads * shape_.head_dim;
  for (KvLayerView& layer : layers_) {
    // Host memcpy: a device-resident cache needs the backend's copy instead.
    SS_CHECK(layer.k.device() == Device::kCpu);
    for (Tensor* t : {&layer.k, &layer.v}) {
      const size_t block_bytes = dtype_bytes(t->dtype(), block_values);
      auto* base = static_cast<uint8_t*>(t->raw());
      std::memcpy(base + dst * block_bytes, base + src * block_bytes, block_bytes);
    }
  }
  int32_t* positions = positions_.data<int32_t>();
  std::memcpy(positions + dst * shape_.block_size, positions + src * shape_.block_size,
              static_cast<size_t>(shape_.block_size) * sizeof(int32_t));
}

size_t KvCache::resident_bytes() const {
  if (device() != Device::kCpu) return nbytes();
  size_t n = specstack::resident_bytes(positions_.raw(), positions_.nbytes());
  for (const KvLayerView& layer : layers_) {
    n += specstack::resident_bytes(layer.k.raw(), layer.k.nbytes());
    n += specstack::resident_bytes(layer.v.raw(), layer.v.nbytes());
  }
  return n;
}

size_t KvCache::nbytes() const {
  return bytes_per_block(shape_) * static_cast<size_t>(shape_.n_blocks);
}

}  // namespace specstack

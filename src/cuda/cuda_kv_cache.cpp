#include "cuda/cuda_kv_cache.h"

#include "base/check.h"

namespace specstack::cuda {

std::shared_ptr<uint8_t> device_alloc_shared(size_t bytes) {
  void* data = nullptr;
  SS_CUDA_CHECK(cudaMalloc(&data, bytes == 0 ? 1 : bytes));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(data), [](uint8_t* p) { cudaFree(p); });
}

namespace {

size_t layer_elements(const KvCacheShape& shape) {
  return static_cast<size_t>(shape.n_blocks * shape.block_size * shape.n_kv_heads * shape.head_dim);
}

size_t storage_bytes(const KvCacheShape& shape) {
  return 2 * static_cast<size_t>(shape.n_layers) * layer_elements(shape) * sizeof(__nv_bfloat16) +
         static_cast<size_t>(shape.n_blocks * shape.block_size) * sizeof(int32_t);
}

}  // namespace

CudaKvCache::CudaKvCache(const KvCacheShape& shape, cudaStream_t stream)
    : CudaKvCache(shape, stream, device_alloc_shared(storage_bytes(shape))) {}

CudaKvCache::CudaKvCache(const KvCacheShape& shape, cudaStream_t stream,
                         std::shared_ptr<uint8_t> storage)
    : KvCache(shape, Tensor(), {}), stream_(stream), storage_(std::move(storage)) {
  // Zeroed once so padding rows of captured graphs never read NaN bit patterns.
  SS_CUDA_CHECK(cudaMemsetAsync(storage_.get(), 0, storage_bytes(shape), stream_));
  const size_t per_layer = layer_elements(shape);
  auto* base = reinterpret_cast<__nv_bfloat16*>(storage_.get());
  for (int64_t l = 0; l < shape.n_layers; ++l) {
    k_ptrs_.push_back(base + (2 * l) * per_layer);
    v_ptrs_.push_back(base + (2 * l + 1) * per_layer);
  }
  slot_positions_ = reinterpret_cast<int32_t*>(base + 2 * shape.n_layers * per_layer);
}

size_t CudaKvCache::nbytes() const {
  return storage_bytes(shape());
}

void CudaKvCache::copy_block(int32_t src, int32_t dst) {
  const KvCacheShape& s = shape();
  SS_CHECK_LE(0, src);
  SS_CHECK_LT(src, s.n_blocks);
  SS_CHECK_LE(0, dst);
  SS_CHECK_LT(dst, s.n_blocks);
  SS_CHECK_NE(src, dst);
  const size_t block_elements = static_cast<size_t>(s.block_size * s.n_kv_heads * s.head_dim);
  const size_t bytes = block_elements * sizeof(__nv_bfloat16);
  for (int64_t l = 0; l < s.n_layers; ++l) {
    for (__nv_bfloat16* base : {k_ptrs_[size_t(l)], v_ptrs_[size_t(l)]}) {
      SS_CUDA_CHECK(cudaMemcpyAsync(base + dst * block_elements, base + src * block_elements, bytes,
                                    cudaMemcpyDeviceToDevice, stream_));
    }
  }
  SS_CUDA_CHECK(cudaMemcpyAsync(
      slot_positions_ + dst * s.block_size, slot_positions_ + src * s.block_size,
      static_cast<size_t>(s.block_size) * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_));
}

}  // namespace specstack::cuda

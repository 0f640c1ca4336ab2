// CudaKvCache: the paged K/V of one model in device memory, bf16, same
// layout as the CPU cache ([n_blocks, block_size, n_kv_heads, head_dim] per
// layer) plus the slot positions [n_blocks, block_size] i32 on the device.
// One allocation holds every layer. Block copies (copy-on-write) are
// stream-ordered device copies, so they land before the next forward.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <vector>

#include "cuda/device_buffer.h"
#include "kv/kv_cache.h"

namespace specstack::cuda {

class CudaKvCache final : public KvCache {
 public:
  CudaKvCache(const KvCacheShape& shape, cudaStream_t stream);

  Device device() const override { return Device::kCuda; }
  size_t nbytes() const override;
  void copy_block(int32_t src, int32_t dst) override;

  __nv_bfloat16* k(int64_t layer) { return k_ptrs_[static_cast<size_t>(layer)]; }
  __nv_bfloat16* v(int64_t layer) { return v_ptrs_[static_cast<size_t>(layer)]; }
  const __nv_bfloat16* const* k_layers() const { return k_ptrs_.data(); }
  int32_t* slot_positions() { return slot_positions_; }

  static size_t bytes_per_block(const KvCacheShape& shape) {
    return KvCache::bytes_per_block(shape, sizeof(__nv_bfloat16));
  }

 private:
  CudaKvCache(const KvCacheShape& shape, cudaStream_t stream, std::shared_ptr<uint8_t> storage);

  cudaStream_t stream_;
  std::shared_ptr<uint8_t> storage_;
  std::vector<__nv_bfloat16*> k_ptrs_;  // [n_layers] device pointers
  std::vector<__nv_bfloat16*> v_ptrs_;  // [n_layers]
  int32_t* slot_positions_ = nullptr;   // [n_blocks, block_size] device
};

// Device memory owned by a shared_ptr (freed with cudaFree), for tensors and
// caches whose lifetime follows their users.
std::shared_ptr<uint8_t> device_alloc_shared(size_t bytes);

}  // namespace specstack::cuda

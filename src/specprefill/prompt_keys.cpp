#include "specprefill/prompt_keys.h"

#include <cstring>

#include "base/check.h"
#include "kv/kv_cache.h"

namespace specstack {

DensePromptKeys::DensePromptKeys(const float* data, int64_t n_layers, int64_t n_kv_heads,
                                 int64_t n_total_tokens, int64_t head_dim, int64_t token_begin,
                                 int64_t token_end)
    : data_(data),
      n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      n_total_tokens_(n_total_tokens),
      head_dim_(head_dim),
      token_begin_(token_begin),
      token_end_(token_end) {
  SS_CHECK(data != nullptr);
  SS_CHECK(n_layers >= 0 && n_kv_heads >= 0 && head_dim >= 0);
  SS_CHECK(0 <= token_begin && token_begin <= token_end && token_end <= n_total_tokens);
}

void DensePromptKeys::copy_keys(int64_t layer, int64_t kv_head, int64_t begin, int64_t end,
                                float* out) const {
  SS_CHECK(layer >= 0 && layer < n_layers_);
  SS_CHECK(kv_head >= 0 && kv_head < n_kv_heads_);
  SS_CHECK(0 <= begin && begin <= end && end <= n_tokens());
  // Rows of one (layer, kv head) are contiguous: one copy.
  const float* src =
      data_ +
      ((layer * n_kv_heads_ + kv_head) * n_total_tokens_ + token_begin_ + begin) * head_dim_;
  std::memcpy(out, src, static_cast<size_t>((end - begin) * head_dim_) * sizeof(float));
}

Result<PagedPromptKeys> PagedPromptKeys::make(const KvCache& cache,
                                              std::span<const int32_t> block_table,
                                              int64_t slot_begin, int64_t slot_end) {
  const KvCacheShape& shape = cache.shape();
  if (shape.n_layers <= 0 || cache.device() != Device::kCpu) {
    return errorf("prompt keys: the KV cache is not in host memory");
  }
  const int64_t n_slots = static_cast<int64_t>(block_table.size()) * shape.block_size;
  if (slot_begin < 0 || slot_begin >= slot_end || slot_end > n_slots) {
    return errorf("prompt keys: slot range [{}, {}) is empty or outside the {} slots of {} blocks",
                  slot_begin, slot_end, n_slots, block_table.size());
  }
  // Only the blocks the range touches are read.
  const int64_t first_block = slot_begin / shape.block_size;
  const int64_t last_block = (slot_end - 1) / shape.block_size;
  for (int64_t b = first_block; b <= last_block; ++b) {
    const int32_t id = block_table[static_cast<size_t>(b)];
    if (id < 0 || id >= shape.n_blocks) {
      return errorf("prompt keys: block_table[{}] = {} is outside the pool of {} blocks", b, id,
                    shape.n_blocks);
    }
  }
  return PagedPromptKeys(cache, block_table, slot_begin, slot_end);
}

int64_t PagedPromptKeys::n_layers() const {
  return cache_->shape().n_layers;
}
int64_t PagedPromptKeys::n_kv_heads() const {
  return cache_->shape().n_kv_heads;
}
int64_t PagedPromptKeys::head_dim() const {
  return cache_->shape().head_dim;
}

void PagedPromptKeys::copy_keys(int64_t layer, int64_t kv_head, int64_t begin, int64_t end,
                                float* out) const {
  const KvCacheShape& shape = cache_->shape();
  SS_CHECK(layer >= 0 && layer < shape.n_layers);
  SS_CHECK(kv_head >= 0 && kv_head < shape.n_kv_heads);
  SS_CHECK(0 <= begin && begin <= end && end <= n_tokens());
  // k: [n_blocks, block_size, n_kv_heads, head_dim]; one head's row per slot,
  // widened to f32 from the cache's dtype (--kv-dtype).
  const Tensor& k = cache_->layer(layer).k;
  const DType dtype = k.dtype();
  const size_t elem = dtype_size(dtype);
  const auto* base = static_cast<const uint8_t*>(k.raw());
  const int64_t row = shape.n_kv_heads * shape.head_dim;
  const int64_t hd = shape.head_dim;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t slot = slot_begin_ + i;
    const int64_t block = block_table_[static_cast<size_t>(slot / shape.block_size)];
    const int64_t index = block * shape.block_size + slot % shape.block_size;
    const uint8_t* src = base + static_cast<size_t>(index * row + kv_head * hd) * elem;
    float* dst = out + (i - begin) * hd;
    if (dtype == DType::kF32) {
      std::memcpy(dst, src, static_cast<size_t>(hd) * sizeof(float));
      continue;
    }
    const auto* bits = reinterpret_cast<const uint16_t*>(src);
    for (int64_t d = 0; d < hd; ++d)
      dst[d] = dtype == DType::kBF16 ? bf16_to_f32(bits[d]) : f16_to_f32(bits[d]);
  }
}

}  // namespace specstack

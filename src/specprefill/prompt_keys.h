// PromptKeys: read access to the draft's post-RoPE prompt keys for scoring.
// Token i of a view is the i-th scored prompt token; with a cached prefix of P
// tokens a view covers the suffix only (i = position - P), so the softmax runs
// over the suffix keys (ALGORITHM.md "Composition with the prefix cache").
// The scorer copies keys a small tile at a time, so a view never has to hold
// a contiguous [n_tokens, head_dim] copy of a paged cache.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace specstack {

class KvCache;

class PromptKeys {
 public:
  virtual ~PromptKeys() = default;

  virtual int64_t n_layers() const = 0;
  virtual int64_t n_kv_heads() const = 0;
  virtual int64_t n_tokens() const = 0;
  virtual int64_t head_dim() const = 0;
  // Copies the keys of tokens [begin, end) of one layer and kv head into
  // out [end - begin, head_dim]. Requires 0 <= begin <= end <= n_tokens().
  virtual void copy_keys(int64_t layer, int64_t kv_head, int64_t begin, int64_t end,
                         float* out) const = 0;
};

// Keys held contiguously as [n_layers, n_kv_heads, n_total_tokens, head_dim]
// (the layout HF hands its attention kernels); the view covers tokens
// [token_begin, token_end) of that buffer. The buffer must outlive the view.
class DensePromptKeys final : public PromptKeys {
 public:
  DensePromptKeys(const float* data, int64_t n_layers, int64_t n_kv_heads, int64_t n_total_tokens,
                  int64_t head_dim, int64_t token_begin, int64_t token_end);
  DensePromptKeys(const float* data, int64_t n_layers, int64_t n_kv_heads, int64_t n_tokens,
                  int64_t head_dim)
      : DensePromptKeys(data, n_layers, n_kv_heads, n_tokens, head_dim, 0, n_tokens) {}

  int64_t n_layers() const override { return n_layers_; }
  int64_t n_kv_heads() const override { return n_kv_heads_; }
  int64_t n_tokens() const override { return token_end_ - token_begin_; }
  int64_t head_dim() const override { return head_dim_; }
  void copy_keys(int64_t layer, int64_t kv_head, int64_t begin, int64_t end,
                 float* out) const override;

 private:
  const float* data_;
  int64_t n_layers_, n_kv_heads_, n_total_tokens_, head_dim_;
  int64_t token_begin_, token_end_;
};

// Keys in a model's paged KvCache: a sequence's block table and the slot range
// [slot_begin, slot_end) holding the scored prompt tokens (the draft prefills
// densely, so slot i holds position i). The cache and the block table must
// outlive the view and stay unchanged while it is used.
class PagedPromptKeys final : public PromptKeys {
 public:
  // Errors (so speculative prefill falls back) when the cache is not in host
  // memory, the range is empty or reaches past the block table, or a block id
  // is out of range.
  static Result<PagedPromptKeys> make(const KvCache& cache, std::span<const int32_t> block_table,
                                      int64_t slot_begin, int64_t slot_end);

  int64_t n_layers() const override;
  int64_t n_kv_heads() const override;
  int64_t n_tokens() const override { return slot_end_ - slot_begin_; }
  int64_t head_dim() const override;
  void copy_keys(int64_t layer, int64_t kv_head, int64_t begin, int64_t end,
                 float* out) const override;

 private:
  PagedPromptKeys(const KvCache& cache, std::span<const int32_t> block_table, int64_t slot_begin,
                  int64_t slot_end)
      : cache_(&cache), block_table_(block_table), slot_begin_(slot_begin), slot_end_(slot_end) {}

  const KvCache* cache_;
  std::span<const int32_t> block_table_;
  int64_t slot_begin_, slot_end_;
};

}  // namespace specstack

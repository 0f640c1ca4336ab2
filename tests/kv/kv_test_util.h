// Shared helpers for the kv tests: a small KvCache whose slots are "computed"
// by writing each token id into the slot's position and K/V values, so a test
// can read back which tokens a sequence's blocks hold.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_manager.h"

namespace specstack::testing {

using Ids = std::vector<int32_t>;

inline KvCacheShape small_kv_shape(int64_t n_blocks, int64_t block_size = 4) {
  KvCacheShape shape;
  shape.n_layers = 2;
  shape.n_blocks = n_blocks;
  shape.block_size = block_size;
  shape.n_kv_heads = 2;
  shape.head_dim = 3;
  return shape;
}

// K/V value of element (layer, head, dim) for a slot holding `token`; V is
// negated so a K/V mix-up shows.
inline float kv_value(int32_t token, int64_t layer, int64_t head, int64_t dim) {
  return static_cast<float>(token * 1000 + layer * 100 + head * 10 + dim);
}

// Writes tokens into the sequence's slots [first_slot, first_slot + size).
inline void write_slots(KvCache& cache, const KvSequence& seq, int32_t first_slot,
                        const Ids& tokens) {
  const KvCacheShape& shape = cache.shape();
  const int64_t row = shape.n_kv_heads * shape.head_dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t slot = first_slot + static_cast<int64_t>(i);
    const int64_t block = seq.blocks()[static_cast<size_t>(slot / shape.block_size)];
    const int64_t index = block * shape.block_size + slot % shape.block_size;
    cache.layer(0).positions.data<int32_t>()[index] = tokens[i];
    for (int64_t l = 0; l < shape.n_layers; ++l) {
      for (int64_t h = 0; h < shape.n_kv_heads; ++h) {
        for (int64_t d = 0; d < shape.head_dim; ++d) {
          cache.layer(l).k.f32()[index * row + h * shape.head_dim + d] =
              kv_value(tokens[i], l, h, d);
          cache.layer(l).v.f32()[index * row + h * shape.head_dim + d] =
              -kv_value(tokens[i], l, h, d);
        }
      }
    }
  }
}

// The token held by each of the sequence's slots, or -1 where K/V disagree
// with the position (a partial or mixed-up copy).
inline Ids read_slots(const KvCache& cache, const KvSequence& seq) {
  const KvCacheShape& shape = cache.shape();
  const int64_t row = shape.n_kv_heads * shape.head_dim;
  Ids tokens;
  for (int64_t slot = 0; slot < seq.n_slots(); ++slot) {
    const int64_t block = seq.blocks()[static_cast<size_t>(slot / shape.block_size)];
    const int64_t index = block * shape.block_size + slot % shape.block_size;
    int32_t token = cache.layer(0).positions.data<int32_t>()[index];
    for (int64_t l = 0; l < shape.n_layers; ++l) {
      for (int64_t e = 0; e < row; ++e) {
        const float expected = kv_value(token, l, e / shape.head_dim, e % shape.head_dim);
        if (cache.layer(l).k.f32()[index * row + e] != expected ||
            cache.layer(l).v.f32()[index * row + e] != -expected) {
          token = -1;
        }
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

}  // namespace specstack::testing

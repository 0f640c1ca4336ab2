// Paged attention on the CPU: K/V rows are written into their block slots and
// each query attends over its own sequence's slots [0, own slot] (causal by
// slot order, so sparse prefill works), optionally limited to a sliding
// window measured in positions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/op_timer.h"

namespace specstack {
namespace {

struct SlotAddress {
  int64_t block;
  int64_t offset;
};

inline SlotAddress locate(const AttentionBatch& batch, int64_t seq, int64_t slot,
                          int64_t block_size) {
  const auto& table = batch.block_tables[static_cast<size_t>(seq)];
  int64_t logical_block = slot / block_size;
  SS_CHECK_LT(logical_block, static_cast<int64_t>(table.size()));
  return {table[static_cast<size_t>(logical_block)], slot % block_size};
}

inline float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

void CpuBackend::write_kv(const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                          KvLayerView& layer) {
  SS_PROFILE(kOpWriteKv);
  const int64_t n_tokens = static_cast<int64_t>(batch.token_seq.size());
  const int64_t row = layer.n_kv_heads * layer.head_dim;
  SS_CHECK_EQ(k.size(0), n_tokens);
  SS_CHECK_EQ(k.size(1), row);
  float* k_store = layer.k.f32();
  float* v_store = layer.v.f32();
  int32_t* positions = layer.positions.data<int32_t>();
  for (int64_t t = 0; t < n_tokens; ++t) {
    SlotAddress at = locate(batch, batch.token_seq[static_cast<size_t>(t)],
                            batch.token_slot[static_cast<size_t>(t)], layer.block_size);
    int64_t flat = at.block * layer.block_size + at.offset;
    std::memcpy(k_store + flat * row, k.f32() + t * row, static_cast<size_t>(row) * sizeof(float));
    std::memcpy(v_store + flat * row, v.f32() + t * row, static_cast<size_t>(row) * sizeof(float));
    positions[flat] = batch.token_pos[static_cast<size_t>(t)];
  }
}

void CpuBackend::attention(const Tensor& q, const AttentionBatch& batch, const KvLayerView& layer,
                           const AttentionParams& params, Tensor& out) {
  SS_PROFILE(kOpAttention);
  const int64_t n_tokens = static_cast<int64_t>(batch.token_seq.size());
  const int64_t head_dim = params.head_dim;
  const int64_t group = params.n_heads / params.n_kv_heads;  // query heads per kv head
  const int64_t kv_row = params.n_kv_heads * head_dim;
  SS_CHECK_EQ(q.size(0), n_tokens);
  SS_CHECK_EQ(q.size(1), params.n_heads * head_dim);
  const float* k_store = layer.k.f32();
  const float* v_store = layer.v.f32();
  const int32_t* slot_positions = layer.positions.data<int32_t>();

  // One task = one token x one kv head: the group's query heads share each K/V row load.
  pool_.parallel_for(n_tokens * params.n_kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;  // [group, n_visible]
    std::vector<float> acc(static_cast<size_t>(group * head_dim));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / params.n_kv_heads;
      const int64_t g = task % params.n_kv_heads;
      const int64_t seq = batch.token_seq[static_cast<size_t>(t)];
      const int64_t n_visible = batch.token_slot[static_cast<size_t>(t)] + 1;
      SS_CHECK_LE(n_visible, batch.seq_n_slots[static_cast<size_t>(seq)]);
      const int32_t q_pos = batch.token_pos[static_cast<size_t>(t)];
      scores.assign(static_cast<size_t>(group * n_visible), -std::numeric_limits<float>::infinity());
      const float* q_rows = q.f32() + t * params.n_heads * head_dim + g * group * head_dim;

      for (int64_t s = 0; s < n_visible; ++s) {
        SlotAddress at = locate(batch, seq, s, layer.block_size);
        int64_t flat = at.block * layer.block_size + at.offset;
        if (params.sliding_window > 0 &&
            static_cast<int64_t>(slot_positions[flat]) <= q_pos - params.sliding_window) {
          continue;
        }
        const float* k_row = k_store + flat * kv_row + g * head_dim;
        for (int64_t h = 0; h < group; ++h) {
          scores[static_cast<size_t>(h * n_visible + s)] =
              dot(q_rows + h * head_dim, k_row, head_dim) * params.scale;
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        float* row = scores.data() + h * n_visible;
        float max_score = *std::max_element(row, row + n_visible);
        float total = 0.0f;
        for (int64_t s = 0; s < n_visible; ++s) {
          row[s] = std::isinf(row[s]) ? 0.0f : std::exp(row[s] - max_score);
          total += row[s];
        }
        float inv = total > 0.0f ? 1.0f / total : 0.0f;
        for (int64_t s = 0; s < n_visible; ++s) row[s] *= inv;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t s = 0; s < n_visible; ++s) {
        SlotAddress at = locate(batch, seq, s, layer.block_size);
        int64_t flat = at.block * layer.block_size + at.offset;
        const float* v_row = v_store + flat * kv_row + g * head_dim;
        for (int64_t h = 0; h < group; ++h) {
          float p = scores[static_cast<size_t>(h * n_visible + s)];
          if (p == 0.0f) continue;
          float* a = acc.data() + h * head_dim;
          for (int64_t d = 0; d < head_dim; ++d) a[d] += p * v_row[d];
        }
      }
      float* out_rows = out.f32() + t * params.n_heads * head_dim + g * group * head_dim;
      std::memcpy(out_rows, acc.data(), acc.size() * sizeof(float));
    }
  });
}

}  // namespace specstack

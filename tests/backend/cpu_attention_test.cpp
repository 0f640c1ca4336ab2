// Paged attention (both the direct and the GEMM path) against a naive
// double-precision reference on random data: shuffled physical blocks, several
// sequences per step, GQA, sparse positions and sliding windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"

namespace specstack {
namespace {

struct SeqSetup {
  int32_t n_cached;  // slots filled by earlier steps
  int32_t n_new;     // query tokens in this step
};

struct Case {
  int64_t n_heads, n_kv_heads, head_dim, block_size, window;
  std::vector<SeqSetup> seqs;
};

void run_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t kv_row = c.n_kv_heads * c.head_dim;
  const int64_t q_row = c.n_heads * c.head_dim;
  int64_t total_blocks = 0;
  for (const auto& s : c.seqs) total_blocks += (s.n_cached + s.n_new + c.block_size - 1) / c.block_size;
  KvLayerView layer;
  layer.k = Tensor::zeros(DType::kF32, {total_blocks, c.block_size, c.n_kv_heads, c.head_dim});
  layer.v = Tensor::zeros(DType::kF32, {total_blocks, c.block_size, c.n_kv_heads, c.head_dim});
  layer.positions = Tensor::zeros(DType::kI32, {total_blocks, c.block_size});
  layer.block_size = c.block_size;
  layer.n_kv_heads = c.n_kv_heads;
  layer.head_dim = c.head_dim;

  // Physical blocks handed out in a shuffled order.
  std::vector<int32_t> physical(static_cast<size_t>(total_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  std::vector<std::vector<int32_t>> tables(c.seqs.size());
  std::vector<std::vector<int32_t>> slot_pos(c.seqs.size());  // position of each logical slot
  std::vector<int32_t> n_slots;
  size_t next_block = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int32_t total = c.seqs[s].n_cached + c.seqs[s].n_new;
    for (int64_t b = 0; b < (total + c.block_size - 1) / c.block_size; ++b) tables[s].push_back(physical[next_block++]);
    // Sparse, strictly increasing positions (gaps of 1..4), as after speculative prefill.
    int32_t pos = static_cast<int32_t>(rng() % 5);
    for (int32_t i = 0; i < total; ++i) {
      slot_pos[s].push_back(pos);
      pos += 1 + static_cast<int32_t>(rng() % 4);
    }
    n_slots.push_back(total);
  }
  auto flat = [&](size_t s, int64_t slot) {
    return tables[s][static_cast<size_t>(slot / c.block_size)] * c.block_size + slot % c.block_size;
  };
  // Cached slots: random K/V written directly.
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int32_t i = 0; i < c.seqs[s].n_cached; ++i) {
      const int64_t f = flat(s, i);
      for (int64_t d = 0; d < kv_row; ++d) {
        layer.k.f32()[f * kv_row + d] = normal(rng);
        layer.v.f32()[f * kv_row + d] = normal(rng);
      }
      layer.positions.data<int32_t>()[f] = slot_pos[s][static_cast<size_t>(i)];
    }
  }
  // This step's tokens, interleaved across sequences.
  std::vector<int32_t> token_seq, token_slot, token_pos;
  std::vector<int32_t> emitted(c.seqs.size(), 0);
  for (bool any = true; any;) {
    any = false;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      if (emitted[s] == c.seqs[s].n_new) continue;
      const int32_t slot = c.seqs[s].n_cached + emitted[s]++;
      token_seq.push_back(static_cast<int32_t>(s));
      token_slot.push_back(slot);
      token_pos.push_back(slot_pos[s][static_cast<size_t>(slot)]);
      any = true;
    }
  }
  const auto n_tokens = static_cast<int64_t>(token_seq.size());
  Tensor q = Tensor::zeros(DType::kF32, {n_tokens, q_row});
  Tensor k = Tensor::zeros(DType::kF32, {n_tokens, kv_row});
  Tensor v = Tensor::zeros(DType::kF32, {n_tokens, kv_row});
  for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = normal(rng);
  for (int64_t i = 0; i < k.numel(); ++i) k.f32()[i] = normal(rng), v.f32()[i] = normal(rng);

  AttentionBatch batch;
  batch.token_seq = token_seq;
  batch.token_slot = token_slot;
  batch.token_pos = token_pos;
  for (const auto& t : tables) batch.block_tables.emplace_back(t);
  batch.seq_n_slots = n_slots;
  AttentionParams params{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)), c.window};

  CpuBackend backend(CpuBackendOptions{2});
  backend.write_kv(k, v, batch, layer);
  Tensor out = Tensor::zeros(DType::kF32, {n_tokens, q_row});
  std::fill_n(out.f32(), out.numel(), std::nanf(""));  // poisoned: every element must be written
  backend.attention(q, batch, layer, params, out);

  // Naive reference in double.
  const int64_t group = c.n_heads / c.n_kv_heads;
  double diff = 0, norm = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const size_t s = static_cast<size_t>(token_seq[t]);
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t g = h / group;
      std::vector<double> w;
      std::vector<int64_t> keys;
      for (int64_t slot = 0; slot <= token_slot[t]; ++slot) {
        const int32_t kp = slot_pos[s][static_cast<size_t>(slot)];
        if (c.window > 0 && kp <= token_pos[t] - c.window) continue;
        const int64_t f = flat(s, slot);
        double dot = 0;
        for (int64_t d = 0; d < c.head_dim; ++d) {
          dot += double(q.f32()[t * q_row + h * c.head_dim + d]) * layer.k.f32()[f * kv_row + g * c.head_dim + d];
        }
        w.push_back(dot * params.scale);
        keys.push_back(f);
      }
      const double mx = *std::max_element(w.begin(), w.end());
      double total = 0;
      for (double& x : w) total += (x = std::exp(x - mx));
      for (int64_t d = 0; d < c.head_dim; ++d) {
        double ref = 0;
        for (size_t i = 0; i < w.size(); ++i) ref += w[i] / total * layer.v.f32()[keys[i] * kv_row + g * c.head_dim + d];
        const double ours = out.f32()[t * q_row + h * c.head_dim + d];
        ASSERT_FALSE(std::isnan(ours)) << "unwritten output t=" << t << " h=" << h;
        diff += (ours - ref) * (ours - ref);
        norm += ref * ref;
      }
    }
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-5);
}

TEST(CpuAttention, MatchesNaiveReferenceOnRandomPagedBatches) {
  const std::vector<Case> cases = {
      // decode-only (direct path), GQA 4:1
      {8, 2, 16, 16, 0, {{37, 1}, {0, 1}, {100, 1}}},
      // prefill-only (GEMM path) with a cached prefix, MHA
      {4, 4, 32, 16, 0, {{20, 70}}},
      // mixed: prefill chunk + decodes + short chunk below the GEMM threshold
      {14, 2, 64, 16, 0, {{0, 45}, {63, 1}, {5, 3}, {31, 33}}},
      // sliding window by position (sparse positions make slot != position)
      {4, 2, 32, 8, 20, {{50, 40}, {70, 1}, {10, 5}}},
      // block size 1 and odd head_dim
      {6, 3, 12, 1, 0, {{9, 12}, {4, 1}}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case with " << c.seqs.size() << " seqs, window " << c.window);
    run_case(c, seed++);
    run_case(c, seed++);
  }
}

}  // namespace
}  // namespace specstack

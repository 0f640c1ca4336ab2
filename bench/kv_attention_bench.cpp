// kv_attention_bench: CPU decode attention alone over an f32, bf16 and f16
// KV cache (--kv-dtype), so the KV dtype's effect is not lost in a whole
// model's noise: B sequences of context L, one query row each (a decode
// step), block tables shuffled over the pool, over --layers layers (each its
// own cache, so the KV streams from DRAM as in a model instead of staying in
// the CPU caches, as one layer's 4 MB would). The dtypes are
// interleaved call by call (a loaded machine drifts), median of the calls.
// Prints microseconds per step (all layers) and the KV bytes read per second.
//   build/bench/kv_attention_bench [--heads 14 --kv-heads 2 --head-dim 64]
//       [--layers 24] [--context 4096] [--batch 1] [--calls 30] [-t 2]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"

using namespace specstack;

int main(int argc, char** argv) {
  int64_t heads = 14, kv_heads = 2, head_dim = 64, context = 4096, batch = 1, calls = 30;
  int64_t n_layers = 24;
  int threads = 2;
  CLI::App app{"CPU decode attention over f32 / bf16 / f16 KV"};
  app.add_option("--heads", heads);
  app.add_option("--kv-heads", kv_heads);
  app.add_option("--head-dim", head_dim);
  app.add_option("--layers", n_layers);
  app.add_option("--context", context);
  app.add_option("--batch", batch);
  app.add_option("--calls", calls);
  app.add_option("-t,--threads", threads);
  CLI11_PARSE(app, argc, argv);

  constexpr int64_t kBlock = 16;
  const int64_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  const int64_t n_blocks = blocks_per_seq * batch;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int32_t> physical(static_cast<size_t>(n_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    tables[size_t(b)].assign(physical.begin() + b * blocks_per_seq,
                             physical.begin() + (b + 1) * blocks_per_seq);

  // Fill each cache by writing the same f32 rows through write_kv.
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  std::vector<std::vector<KvLayerView>> layers(3);  // [dtype][layer]
  std::vector<int32_t> fill_seq, fill_slot, fill_pos;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < context; ++s) {
      fill_seq.push_back(int32_t(b));
      fill_slot.push_back(int32_t(s));
      fill_pos.push_back(int32_t(s));
    }
  std::vector<int32_t> n_slots(static_cast<size_t>(batch), int32_t(context));
  AttentionBatch fill;
  fill.token_seq = fill_seq;
  fill.token_slot = fill_slot;
  fill.token_pos = fill_pos;
  for (const auto& t : tables) fill.block_tables.emplace_back(t);
  fill.seq_n_slots = n_slots;
  const auto n_fill = static_cast<int64_t>(fill_seq.size());
  Tensor k = Tensor::zeros(DType::kF32, {n_fill, kv_heads * head_dim});
  Tensor v = Tensor::zeros(DType::kF32, {n_fill, kv_heads * head_dim});
  for (int64_t i = 0; i < k.numel(); ++i) k.f32()[i] = normal(rng), v.f32()[i] = normal(rng);
  CpuBackend backend(CpuBackendOptions{threads});
  for (size_t d = 0; d < 3; ++d) {
    for (int64_t l = 0; l < n_layers; ++l) {
      const DType dtype = dtypes[d];
      KvLayerView layer;
      layer.k = Tensor::zeros(dtype, {n_blocks, kBlock, kv_heads, head_dim});
      layer.v = Tensor::zeros(dtype, {n_blocks, kBlock, kv_heads, head_dim});
      layer.positions = Tensor::zeros(DType::kI32, {n_blocks, kBlock});
      layer.block_size = kBlock;
      layer.n_kv_heads = kv_heads;
      layer.head_dim = head_dim;
      backend.write_kv(k, v, fill, layer);
      layers[d].push_back(std::move(layer));
    }
  }

  // The decode step: the last slot of each sequence queries all of it.
  std::vector<int32_t> seq(static_cast<size_t>(batch)), slot(static_cast<size_t>(batch)),
      pos(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    seq[size_t(b)] = int32_t(b);
    slot[size_t(b)] = pos[size_t(b)] = int32_t(context - 1);
  }
  AttentionBatch step;
  step.token_seq = seq;
  step.token_slot = slot;
  step.token_pos = pos;
  step.block_tables = fill.block_tables;
  step.seq_n_slots = n_slots;
  Tensor q = Tensor::zeros(DType::kF32, {batch, heads * head_dim});
  for (int64_t i = 0; i < q.numel(); ++i) q.f32()[i] = normal(rng);
  Tensor out = Tensor::zeros(DType::kF32, {batch, heads * head_dim});
  const AttentionParams params{heads, kv_heads, head_dim, 1.0f / std::sqrt(float(head_dim)), 0};

  std::vector<std::vector<double>> us(3);
  for (int64_t c = 0; c < calls + 3; ++c) {
    for (size_t d = 0; d < 3; ++d) {
      const auto start = std::chrono::steady_clock::now();
      for (const KvLayerView& layer : layers[d]) backend.attention(q, step, layer, params, out);
      const double t =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
      if (c >= 3) us[d].push_back(t);  // 3 warm-up rounds
    }
  }
  std::printf(
      "| kv dtype | us per step (median of %lld) | KV read GB/s | vs f32 |\n|---|---|---|---|\n",
      static_cast<long long>(calls));
  double f32_us = 0;
  for (size_t d = 0; d < 3; ++d) {
    std::sort(us[d].begin(), us[d].end());
    const double median = us[d][us[d].size() / 2];
    if (d == 0) f32_us = median;
    const double bytes = double(n_layers * batch * context * kv_heads * head_dim * 2) *
                         double(dtype_size(dtypes[d]));
    std::printf("| %s | %.1f | %.2f | %.2fx |\n", dtype_name(dtypes[d]), median,
                bytes / (median * 1e-6) / 1e9, f32_us / median);
  }
  return 0;
}

// score_bench: SpecPrefill's token scoring on the device (cuda/score.h, ALGORITHM.md step 3)
// alone, at a draft's shape: n_steps lookahead queries of n_layers layers against a paged bf16
// key cache of one prompt (16-slot blocks, shuffled), n_scored layers scored (layer 0's cache
// repeated, as a draft's layers are alike in size). Per point: one warm-up call, then the mean of
// 20 calls timed with CUDA events (kernels only; the engine then downloads n_tokens floats).
//   build/bench/score_bench [--points tokens:scored_layers:heads:kv_heads:head_dim:steps,...]
// Default: qwen2.5-0.5b (14 / 2 heads, head dim 64, 8 steps, 24 layers) on 8K and 32K prompts
// with 2 and 24 scored layers.
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "bench_points.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/score.h"

using namespace specstack::cuda;

namespace {

constexpr int32_t kBlock = 16, kPool = 13;

struct Point {
  int32_t tokens = 8192, scored = 24, heads = 14, kv_heads = 2, head_dim = 64, steps = 8;
};

bool valid_point(const std::array<int32_t, 6>& f) {
  return f[0] > 0 && f[1] > 0 && f[3] > 0 && f[2] % f[3] == 0 && f[4] > 0 && f[5] > 0;
}

void run_point(const Point& p) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const int32_t n_table = (p.tokens + kBlock - 1) / kBlock;
  std::vector<int32_t> table(static_cast<size_t>(n_table));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  // One layer's keys [n_table * 16, kv_heads, head_dim]; queries [steps, scored, heads * head_dim].
  std::vector<__nv_bfloat16> keys(size_t(n_table) * kBlock * p.kv_heads * p.head_dim);
  for (auto& k : keys) k = __float2bfloat16(dist(rng));
  std::vector<float> queries(size_t(p.steps) * p.scored * p.heads * p.head_dim);
  for (auto& q : queries) q = dist(rng);
  DeviceBuffer<__nv_bfloat16> d_keys(keys.size());
  DeviceBuffer<float> d_queries(queries.size()), importance(static_cast<size_t>(p.tokens));
  DeviceBuffer<float> workspace(score_workspace_floats(p.steps, p.heads, p.tokens));
  DeviceBuffer<int32_t> d_table(table.size());
  d_keys.upload(keys);
  d_queries.upload(queries);
  d_table.upload(table);
  std::vector<int32_t> scored(static_cast<size_t>(p.scored));
  std::iota(scored.begin(), scored.end(), 0);
  const std::vector<const __nv_bfloat16*> caches(static_cast<size_t>(p.scored), d_keys.data());

  ScoreArgs args;
  args.queries = d_queries.data();
  args.n_steps = p.steps;
  args.n_layers = p.scored;
  args.n_heads = p.heads;
  args.n_kv_heads = p.kv_heads;
  args.head_dim = p.head_dim;
  args.scored_layers = scored.data();
  args.n_scored = p.scored;
  args.k_caches = caches.data();
  args.block_table = d_table.data();
  args.block_size = kBlock;
  args.slot_begin = 0;
  args.slot_end = p.tokens;
  args.pool_kernel = kPool;
  args.importance = importance.data();
  args.workspace = workspace.data();

  constexpr int kReps = 20;
  score_tokens(args, nullptr);  // warm-up
  cudaEvent_t start, stop;
  SS_CUDA_CHECK(cudaEventCreate(&start));
  SS_CUDA_CHECK(cudaEventCreate(&stop));
  SS_CUDA_CHECK(cudaEventRecord(start));
  for (int i = 0; i < kReps; ++i) score_tokens(args, nullptr);
  SS_CUDA_CHECK(cudaEventRecord(stop));
  SS_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  SS_CUDA_CHECK(cudaEventDestroy(start));
  SS_CUDA_CHECK(cudaEventDestroy(stop));
  // Key bytes the scored layers read once each.
  const double key_bytes = double(p.tokens) * p.kv_heads * p.head_dim * 2 * p.scored;
  std::printf("| %d | %d | %d / %d | %d | %d | %.3f | %.2f |\n", p.tokens, p.scored, p.heads,
              p.kv_heads, p.head_dim, p.steps, ms / kReps, key_bytes / (ms / kReps * 1e-3) / 1e12);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Point> points;
  for (int32_t tokens : {8192, 32768}) {
    for (int32_t scored : {2, 24}) points.push_back({tokens, scored, 14, 2, 64, 8});
  }
  if (const auto text = specstack::bench::points_option(
          argc, argv,
          "score_bench [--points tokens:scored_layers:heads:kv_heads:head_dim:steps,...]")) {
    points.clear();
    for (const auto& f : specstack::bench::parse_points<6>(
             *text, "score_bench", "tokens:scored_layers:heads:kv_heads:head_dim:steps",
             valid_point)) {
      points.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
    }
  }
  std::printf(
      "| prompt tokens | scored layers | heads | head dim | steps | ms per call | key TB/s |\n"
      "|---|---|---|---|---|---|---|\n");
  for (const Point& p : points) run_point(p);
  return 0;
}

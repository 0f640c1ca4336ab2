// attention_bench: the paged attention kernels alone (cuda/attention.h,
// cuda/verify_attention.h) at the qwen2.5-7b shape (28 heads, 4 kv heads,
// head dim 128, block 16): B sequences of context L, each with `rows` query
// rows at its last slots (5 = a K = 4 verify run, 1 = a decode row), block
// tables shuffled over the pool as a serving pool is (--draft: the
// qwen2.5-0.5b shape, 14 heads, 2 kv heads, head dim 64). Per point: the
// per-token kernel and the run kernel (its mma.sync math, and its wgmma math on
// an sm_90a GPU) at several partition sizes, 3 warm-up
// calls, then the median of 5 batches of 10 calls timed with CUDA events.
// Prints microseconds per call (one layer) and the effective KV bandwidth:
// the bytes of K and V the batch attends over (B x L x kv heads x head dim
// x 2 x 2 bytes) per second.
// Decode points (rows 1) also time the kernel as a decode graph launches it,
// for a graph captured at --capacity slots (default: the context).
//   build/bench/attention_bench [--points B:L:rows,...] [--draft] [--capacity N]
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench_points.h"
#include "bench_timing.h"
#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/verify_attention.h"

using namespace specstack::cuda;

namespace {

constexpr int32_t kBlock = 16;

// Attention shape: qwen2.5-7b (the target) or, with --draft, qwen2.5-0.5b.
struct Shape {
  int32_t heads = 28, kv_heads = 4, head_dim = 128;
};

struct Point {
  int32_t batch, context, rows;
};

template <typename Call>
double time_us(Call call) {
  return specstack::bench::median_us_per_call(call, 10, 5);
}

void run_point(const Shape& shape, const Point& p, int32_t capacity, std::mt19937& rng) {
  const int32_t kHeads = shape.heads, kKvHeads = shape.kv_heads, kHeadDim = shape.head_dim;
  const int32_t blocks_per_seq = (p.context + kBlock - 1) / kBlock;
  const int32_t n_blocks = p.batch * blocks_per_seq;
  const size_t kv_elems = size_t(n_blocks) * kBlock * kKvHeads * kHeadDim;
  // K and V: small random values (the same for every point: only bandwidth matters).
  std::vector<__nv_bfloat16> host(kv_elems);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (size_t i = 0; i < std::min<size_t>(kv_elems, 1 << 20); ++i)
    host[i] = __float2bfloat16(dist(rng));
  for (size_t i = 1 << 20; i < kv_elems; ++i) host[i] = host[i % (1 << 20)];
  DeviceBuffer<__nv_bfloat16> k(kv_elems), v(kv_elems);
  k.upload(host);
  v.upload(host);
  std::vector<int32_t> positions(size_t(n_blocks) * kBlock);
  std::vector<int32_t> tables(static_cast<size_t>(n_blocks));
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), rng);
  for (int32_t s = 0; s < p.batch; ++s) {
    for (int32_t j = 0; j < p.context; ++j) {
      const int32_t b = tables[size_t(s) * blocks_per_seq + j / kBlock];
      positions[size_t(b) * kBlock + j % kBlock] = j;
    }
  }
  const int32_t n_tokens = p.batch * p.rows;
  std::vector<int32_t> seq(n_tokens), slot(n_tokens), run(n_tokens);
  for (int32_t t = 0; t < n_tokens; ++t) {
    seq[t] = t / p.rows;
    slot[t] = p.context - p.rows + t % p.rows;
  }
  paged_attention_runs(seq.data(), slot.data(), n_tokens, kHeads / kKvHeads, run.data());
  const auto n_runs =
      static_cast<int32_t>(std::count(run.begin(), run.end(), p.rows > 1 ? p.rows : 1));
  std::vector<__nv_bfloat16> q_host(size_t(n_tokens) * kHeads * kHeadDim);
  for (auto& x : q_host) x = __float2bfloat16(dist(rng));
  DeviceBuffer<__nv_bfloat16> q(q_host.size()), out(q_host.size());
  q.upload(q_host);
  DeviceBuffer<int32_t> d_pos(positions.size()), d_tables(tables.size()), d_seq(seq.size()),
      d_slot(slot.size()), d_run(run.size());
  d_pos.upload(positions);
  d_tables.upload(tables);
  d_seq.upload(seq);
  d_slot.upload(slot);
  d_run.upload(run);
  const int32_t partition = paged_attention_partition_size(n_tokens, kKvHeads);
  // Sized for the smallest partition any variant below uses.
  const int32_t graph_capacity = std::max(capacity, p.context);
  DeviceBuffer<float> ws(std::max<size_t>(
      1, paged_attention_workspace_floats(n_tokens, kHeads, kHeadDim, graph_capacity, 64)));

  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = int64_t{kHeads} * kHeadDim;
  a.k_cache = k.data();
  a.v_cache = v.data();
  a.slot_positions = d_pos.data();
  a.block_tables = d_tables.data();
  a.max_blocks_per_seq = blocks_per_seq;
  a.token_seq = d_seq.data();
  a.token_slot = d_slot.data();
  a.token_pos = d_slot.data();  // positions = slots here
  a.n_tokens = n_tokens;
  a.n_heads = kHeads;
  a.n_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.block_size = kBlock;
  a.scale = 0.088f;
  a.max_context = p.context;
  a.partition_size = partition;
  a.out = out.data();
  a.out_stride = int64_t{kHeads} * kHeadDim;
  a.workspace = ws.data();
  a.pdl = false;
  const double bytes = double(p.batch) * p.context * kKvHeads * kHeadDim * 2 * 2;
  auto report = [&](const char* kernel, int32_t part, double us) {
    std::printf("| %d | %d | %d | %s | %d | %.1f | %.2f |\n", p.batch, p.context, p.rows, kernel,
                part, us, bytes / us / 1e6);
    std::fflush(stdout);
  };
  a.token_run = nullptr;
  report("per-token", partition, time_us([&] { paged_attention(a, nullptr); }));
  a.token_run = d_run.data();
  a.n_runs = n_runs;
  // The grid over the runs, as an eager (verify) step launches it.
  std::vector<int32_t> first;
  for (int32_t t = 0; t < n_tokens; ++t) {
    if (run[size_t(t)] > 0) first.push_back(t);
  }
  DeviceBuffer<int32_t> d_first(first.size());
  d_first.upload(first);
  a.run_first = d_first.data();
  // The run kernel's two maths (PagedAttentionArgs::run_math): mma.sync, and
  // wgmma where the GPU runs the sm_90a image; then what kAuto picks.
  for (RunMath math : {RunMath::kMma, RunMath::kWgmma}) {
    a.run_math = math;
    const bool wgmma = math == RunMath::kWgmma;
    if (wgmma && !run_attention_wgmma_supported(a)) continue;
    const char* name = wgmma ? "run wgmma" : "run mma";
    // What an eager step launches: the default partition, about one wave of
    // CTAs (run_attention_eager_grid_parts) or the run-time split.
    a.partition_size = partition;
    a.run_partition_size = 0;
    a.run_grid_parts = run_attention_eager_grid_parts(n_runs, kKvHeads);
    a.run_split = run_attention_split(n_runs, kKvHeads, p.context);
    report(wgmma ? "run wgmma (eager)" : "run mma (eager)", run_attention_partition_size(a),
           time_us([&] { paged_attention(a, nullptr); }));
    a.run_grid_parts = 0;
    a.run_split = 0;
    for (int32_t part : {64, 128, 256, 512, 1024}) {
      a.partition_size = std::min(partition, part);  // run partitions >= partition_size
      a.run_partition_size = part;
      report(name, part, time_us([&] { paged_attention(a, nullptr); }));
    }
    // A capped grid (PagedAttentionArgs::run_grid_parts = G): each CTA
    // accumulates partitions z, z + G, ... into one entry (the default
    // partition); G = 0: one CTA a partition.
    a.partition_size = partition;
    a.run_partition_size = 0;
    for (int32_t grid : {0, 1, 2, 3, 4, 8}) {
      a.run_grid_parts = grid;
      char name[64];
      std::snprintf(name, sizeof(name), "run %s grid G=%d", wgmma ? "wgmma" : "mma", grid);
      report(name, run_attention_partition_size(a), time_us([&] { paged_attention(a, nullptr); }));
    }
    a.run_grid_parts = 0;
    // The run-time split (PagedAttentionArgs::run_split: each run's tiles dealt
    // over S CTAs), reported with the partition column = -S.
    a.partition_size = partition;
    a.run_partition_size = 0;
    for (int32_t split : {2, 4, 8, 16, 32}) {
      if (int64_t{split} * kRunMaxPartition < p.context || split * 64 > p.context) continue;
      a.run_split = split;
      report(wgmma ? "run wgmma split" : "run mma split", -split,
             time_us([&] { paged_attention(a, nullptr); }));
    }
    a.run_split = 0;
  }
  a.run_math = RunMath::kAuto;
  a.partition_size = partition;
  a.run_partition_size = 0;
  std::printf("| %d | %d | %d | auto picks %s |\n", p.batch, p.context, p.rows,
              run_attention_uses_wgmma(a) ? "wgmma" : "mma");
  if (p.rows == 1) {
    // As a decode graph of this batch launches it (cuda_graphs.cpp): the grid
    // over tokens, the graph's partitions and cap on CTAs along them (or its
    // run-time split), max_context = the graph's capacity (--capacity).
    PagedAttentionArgs g = a;
    g.run_first = nullptr;
    g.max_context = graph_capacity;
    g.partition_size = paged_attention_partition_size(p.batch, kKvHeads);
    g.run_partition_size = run_attention_graph_partition_size(p.batch, kKvHeads, g.partition_size);
    g.run_grid_parts = run_attention_graph_grid_parts(p.batch, kKvHeads);
    g.run_split = run_attention_split(p.batch, kKvHeads, graph_capacity);
    report("run graph (capacity)", g.run_split > 0 ? -g.run_split : g.run_partition_size,
           time_us([&] { paged_attention(g, nullptr); }));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* points = "32:16384:5,64:8192:5,32:8192:5,8:8192:5,1:8192:5,32:16384:1,64:8192:1";
  Shape shape;
  int32_t capacity = 0;  // the decode-graph row's max_context (0: the point's context)
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--capacity") == 0 && i + 1 < argc) capacity = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--points") == 0 && i + 1 < argc) points = argv[++i];
    if (std::strcmp(argv[i], "--draft") == 0) shape = Shape{14, 2, 64};
  }
  std::printf("shape: %d heads, %d kv heads, head dim %d\n", shape.heads, shape.kv_heads,
              shape.head_dim);
  std::mt19937 rng(1);
  std::printf("| batch | context | rows | kernel | partition | us | KV TB/s |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& f : specstack::bench::parse_points<3>(points, "attention_bench", "B:L:rows")) {
    run_point(shape, Point{f[0], f[1], f[2]}, capacity, rng);
  }
  return 0;
}

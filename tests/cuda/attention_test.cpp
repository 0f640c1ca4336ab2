// paged_attention against CpuBackend::attention (shuffled physical blocks,
// sparse positions, sequences of 1 to 1000 slots, decode and mid-sequence
// queries, sliding windows, GQA groups 1/2/7, head_dim 16..256, single and
// split-K partitions). Every output is poisoned first (0xFF = NaN).
#include "cuda/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "backend/attention_batch.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda/sm90a.h"
#include "cuda/verify_attention.h"
#include "cuda_test_util.h"

namespace specstack::cuda {
namespace {

using testing::kBf16Tolerance;
using testing::random_values;
using testing::relative_error;
using testing::to_bf16;
using testing::to_f32;
using testing::upload;

// A random paged KV cache: sequences of the given lengths on shuffled
// physical blocks (plus spare ones), positions 3 * slot + 1.
struct PagedKv {
  int32_t block_size = 0, n_kv_heads = 0, head_dim = 0, n_blocks = 0, max_blocks_per_seq = 0;
  std::vector<int32_t> seq_len;    // [n_seqs]
  std::vector<int32_t> tables;     // [n_seqs, max_blocks_per_seq], -1 past the end
  std::vector<float> k, v;         // [n_blocks, block_size, n_kv_heads, head_dim] bf16-rounded
  std::vector<int32_t> positions;  // [n_blocks, block_size]

  int32_t flat(int32_t seq, int32_t slot) const {
    return tables[seq * max_blocks_per_seq + slot / block_size] * block_size + slot % block_size;
  }
  int32_t pos(int32_t seq, int32_t slot) const { return positions[flat(seq, slot)]; }
};

PagedKv make_paged_kv(std::mt19937& rng, std::vector<int32_t> seq_len, int32_t block_size,
                      int32_t n_kv_heads, int32_t head_dim) {
  PagedKv kv;
  kv.block_size = block_size;
  kv.n_kv_heads = n_kv_heads;
  kv.head_dim = head_dim;
  kv.seq_len = std::move(seq_len);
  int32_t used = 0;
  for (int32_t len : kv.seq_len) {
    const int32_t blocks = (len + block_size - 1) / block_size;
    kv.max_blocks_per_seq = std::max(kv.max_blocks_per_seq, blocks);
    used += blocks;
  }
  kv.n_blocks = used + 3;  // spare blocks nobody references
  std::vector<int32_t> physical(static_cast<size_t>(kv.n_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  kv.tables.assign(kv.seq_len.size() * kv.max_blocks_per_seq, -1);
  size_t next = 0;
  for (size_t s = 0; s < kv.seq_len.size(); ++s) {
    const int32_t blocks = (kv.seq_len[s] + block_size - 1) / block_size;
    for (int32_t b = 0; b < blocks; ++b)
      kv.tables[s * kv.max_blocks_per_seq + b] = physical[next++];
  }
  const size_t slots = static_cast<size_t>(kv.n_blocks) * block_size;
  kv.k = random_values(rng, slots * n_kv_heads * head_dim);
  kv.v = random_values(rng, slots * n_kv_heads * head_dim);
  // Unused slots hold junk positions; used ones are sparse: 3 * slot + 1.
  kv.positions.resize(slots);
  for (auto& p : kv.positions) p = static_cast<int32_t>(rng() % 100000);
  for (size_t s = 0; s < kv.seq_len.size(); ++s) {
    for (int32_t j = 0; j < kv.seq_len[s]; ++j) {
      kv.positions[kv.flat(static_cast<int32_t>(s), j)] = 3 * j + 1;
    }
  }
  return kv;
}

struct AttnCase {
  int32_t head_dim, group, n_kv_heads, block_size, window;
  std::vector<int32_t> seq_len;
  int32_t extra_context;  // max_context beyond the batch's need (graph capacity)
  int32_t partition_size = kPartitionSize;
  // > 0: the verify-path layout instead: per sequence a run of this many rows
  // ending at its last slot, a decode row of another sequence, and a
  // 20-row prefill chunk, with token_run from paged_attention_runs.
  int32_t verify_rows = 0;
  int32_t run_partition_size = 0;  // the run kernel's own partition (0: its default)
  int32_t run_grid_parts = 0;      // the run kernel's CTAs along partitions (0: one each)
  int32_t run_split = 0;           // the run kernel's run-time split; -1: run_attention_split's
};

// Verify runs, decode rows and prefill chunks interleaved as a step lays
// them out (each sequence's rows consecutive).
void add_run_tokens(std::mt19937& rng, const PagedKv& kv, int32_t verify_rows,
                    const std::function<void(int32_t, int32_t)>& add) {
  const auto n_seqs = static_cast<int32_t>(kv.seq_len.size());
  for (int32_t s = 0; s < n_seqs; ++s) {
    const int32_t len = kv.seq_len[s];
    switch (s % 3) {
      case 0:  // verify run
        for (int32_t r = verify_rows; r > 0; --r) add(s, len - r);
        break;
      case 1:  // plain decode
        add(s, len - 1);
        break;
      default: {  // a prefill chunk somewhere inside the sequence
        const int32_t first = static_cast<int32_t>(rng() % len);
        for (int32_t j = first; j < std::min(len, first + 20); ++j) add(s, j);
      }
    }
  }
}

// One case on one run-kernel math.
void run_paged_case_on(const AttnCase& c, uint32_t seed, RunMath math) {
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << c.head_dim << " group " << c.group << " kv_heads " << c.n_kv_heads
               << " block " << c.block_size << " window " << c.window << " partition "
               << c.partition_size << " seed " << seed << " wgmma " << (math == RunMath::kWgmma));
  std::mt19937 rng(seed);
  const int32_t hd = c.head_dim, n_heads = c.group * c.n_kv_heads;
  const PagedKv kv = make_paged_kv(rng, c.seq_len, c.block_size, c.n_kv_heads, hd);

  // Tokens: every sequence's decode token (last slot), plus mid-sequence
  // slots including partition edges, interleaved across sequences.
  std::vector<int32_t> token_seq, token_slot, token_pos;
  auto add = [&](int32_t s, int32_t slot) {
    if (slot < 0 || slot >= kv.seq_len[s]) return;
    token_seq.push_back(s);
    token_slot.push_back(slot);
    token_pos.push_back(kv.pos(s, slot));
  };
  if (c.verify_rows > 0) add_run_tokens(rng, kv, c.verify_rows, add);
  for (int32_t s = 0; c.verify_rows == 0 && s < static_cast<int32_t>(kv.seq_len.size()); ++s) {
    const int32_t len = kv.seq_len[s];
    add(s, len - 1);
    add(s, 0);
    add(s, 255);
    add(s, 256);
    add(s, 511);
    add(s, static_cast<int32_t>(rng() % len));
  }
  const auto n_tokens = static_cast<int32_t>(token_seq.size());
  int32_t max_context = 0;
  for (int32_t slot : token_slot) max_context = std::max(max_context, slot + 1);
  max_context += c.extra_context;

  // q rows have padding (as in a fused QKV buffer); wider q spreads the scores.
  const int64_t q_stride = static_cast<int64_t>(n_heads + 2 * c.n_kv_heads) * hd;
  const std::vector<float> q_full = random_values(rng, n_tokens * q_stride, -4.0f, 4.0f);
  const int64_t out_stride = static_cast<int64_t>(n_heads) * hd + 8;

  // CPU twin on the same bf16-rounded values.
  std::vector<float> q_dense(static_cast<size_t>(n_tokens) * n_heads * hd);
  for (int32_t t = 0; t < n_tokens; ++t) {
    std::copy_n(q_full.begin() + t * q_stride, n_heads * hd, q_dense.begin() + t * n_heads * hd);
  }
  Tensor q = Tensor::zeros(DType::kF32, {n_tokens, int64_t{n_heads} * hd});
  std::copy(q_dense.begin(), q_dense.end(), q.f32());
  KvLayerView layer;
  layer.k = Tensor::zeros(DType::kF32, {kv.n_blocks, c.block_size, c.n_kv_heads, hd});
  layer.v = Tensor::zeros(DType::kF32, {kv.n_blocks, c.block_size, c.n_kv_heads, hd});
  layer.positions = Tensor::zeros(DType::kI32, {kv.n_blocks, c.block_size});
  std::copy(kv.k.begin(), kv.k.end(), layer.k.f32());
  std::copy(kv.v.begin(), kv.v.end(), layer.v.f32());
  std::copy(kv.positions.begin(), kv.positions.end(), layer.positions.data<int32_t>());
  layer.block_size = c.block_size;
  layer.n_kv_heads = c.n_kv_heads;
  layer.head_dim = hd;
  AttentionBatch batch;
  batch.token_seq = token_seq;
  batch.token_slot = token_slot;
  batch.token_pos = token_pos;
  for (size_t s = 0; s < kv.seq_len.size(); ++s) {
    const int32_t blocks = (kv.seq_len[s] + c.block_size - 1) / c.block_size;
    batch.block_tables.emplace_back(kv.tables.data() + s * kv.max_blocks_per_seq, blocks);
  }
  batch.seq_n_slots = kv.seq_len;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionParams params{n_heads, c.n_kv_heads, hd, scale, c.window};
  Tensor cpu_out = Tensor::zeros(DType::kF32, {n_tokens, int64_t{n_heads} * hd});
  CpuBackend backend(CpuBackendOptions{2});
  backend.attention(q, batch, layer, params, cpu_out);

  // GPU.
  auto d_q = upload(to_bf16(q_full));
  auto d_k = upload(to_bf16(kv.k));
  auto d_v = upload(to_bf16(kv.v));
  auto d_pos = upload(kv.positions);
  auto d_tables = upload(kv.tables);
  auto d_seq = upload(token_seq);
  auto d_slot = upload(token_slot);
  auto d_tpos = upload(token_pos);
  DeviceBuffer<bf16> d_out(static_cast<size_t>(n_tokens) * out_stride);
  d_out.fill_bytes(0xFF);
  std::vector<int32_t> token_run(token_seq.size());
  int32_t n_runs = 0;
  if (c.verify_rows > 0) {
    const int32_t longest = paged_attention_runs(token_seq.data(), token_slot.data(), n_tokens,
                                                 c.group, token_run.data());
    EXPECT_GE(longest, std::min(c.verify_rows, kRunMaxQueries / c.group));
    n_runs = static_cast<int32_t>(
        std::count_if(token_run.begin(), token_run.end(), [](int32_t r) { return r > 0; }));
  }
  const int32_t run_split =
      c.run_split >= 0 ? c.run_split : run_attention_split(n_runs, c.n_kv_heads, max_context);
  if (c.run_split < 0) {
    EXPECT_GE(run_split, 2) << "the case should take the split";
  }
  DeviceBuffer<float> d_ws(
      std::max<size_t>(1, paged_attention_workspace_floats(n_tokens, n_heads, hd, max_context,
                                                           c.partition_size, run_split)));
  d_ws.fill_bytes(0xFF);  // NaN: an entry the combine reads unwritten shows

  PagedAttentionArgs args;
  args.q = d_q.data();
  args.q_stride = q_stride;
  args.k_cache = d_k.data();
  args.v_cache = d_v.data();
  args.slot_positions = d_pos.data();
  args.block_tables = d_tables.data();
  args.max_blocks_per_seq = kv.max_blocks_per_seq;
  args.token_seq = d_seq.data();
  args.token_slot = d_slot.data();
  args.token_pos = d_tpos.data();
  args.n_tokens = n_tokens;
  args.n_heads = n_heads;
  args.n_kv_heads = c.n_kv_heads;
  args.head_dim = hd;
  args.block_size = c.block_size;
  args.scale = scale;
  args.sliding_window = c.window;
  args.max_context = max_context;
  args.partition_size = c.partition_size;
  args.run_partition_size = c.run_partition_size;
  args.run_grid_parts = c.run_grid_parts;
  args.run_split = run_split;
  args.run_math = math;
  args.out = d_out.data();
  args.out_stride = out_stride;
  args.workspace = d_ws.data();
  DeviceBuffer<int32_t> d_run, d_run_first;
  if (c.verify_rows > 0) {
    d_run = upload(token_run);
    args.token_run = d_run.data();
    args.n_runs = n_runs;
    // Half the cases launch the grid over the runs (run_first, as eager
    // steps do), half over every token (as decode graphs do).
    if (seed % 2 == 0) {
      std::vector<int32_t> first;
      for (int32_t t = 0; t < n_tokens; ++t) {
        if (token_run[size_t(t)] > 0) first.push_back(t);
      }
      d_run_first = upload(first);
      args.run_first = d_run_first.data();
    }
  }
  paged_attention(args, nullptr);
  SS_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> gpu_full = to_f32(d_out.download());

  // Per token, so one wrong query cannot hide in the batch norm.
  const int64_t row = int64_t{n_heads} * hd;
  std::vector<float> gpu_all, cpu_all;
  for (int32_t t = 0; t < n_tokens; ++t) {
    const std::vector<float> gpu(gpu_full.begin() + t * out_stride,
                                 gpu_full.begin() + t * out_stride + row);
    const std::vector<float> cpu(cpu_out.f32() + t * row, cpu_out.f32() + (t + 1) * row);
    EXPECT_LE(relative_error(gpu, cpu), kBf16Tolerance)
        << "token " << t << " seq " << token_seq[t] << " slot " << token_slot[t];
    gpu_all.insert(gpu_all.end(), gpu.begin(), gpu.end());
    cpu_all.insert(cpu_all.end(), cpu.begin(), cpu.end());
  }
  EXPECT_LE(relative_error(gpu_all, cpu_all), kBf16Tolerance);
}

// Cases with verify runs take the run kernel: both of its maths where the
// device runs the sm_90a image (mma.sync, then wgmma), else mma.sync.
void run_paged_case(const AttnCase& c, uint32_t seed) {
  run_paged_case_on(c, seed, RunMath::kMma);
  if (c.verify_rows > 0 && device_runs_sm90a()) run_paged_case_on(c, seed, RunMath::kWgmma);
}

TEST(CudaAttention, PagedMatchesCpu) {
  SS_REQUIRE_GPU();
  const std::vector<int32_t> lens = {1000, 1, 17, 300, 256, 257};
  uint32_t seed = 100;
  for (int32_t hd : {16, 32, 64, 128}) {
    for (int32_t group : {1, 2, 7}) {
      for (int32_t window : {0, 100}) {
        const int32_t n_kv = 1 + static_cast<int32_t>(seed % 3);
        run_paged_case({hd, group, n_kv, 16, window, lens, 0}, seed++);
      }
    }
  }
}

TEST(CudaAttention, PagedHeadDim256AndOddBlocks) {
  SS_REQUIRE_GPU();
  run_paged_case({256, 2, 2, 16, 0, {700, 3, 40}, 0}, 1);
  run_paged_case({256, 4, 1, 16, 50, {700, 3, 40}, 0}, 2);
  run_paged_case({64, 7, 2, 5, 0, {613, 9, 1}, 0}, 3);  // block size not a power of two
  run_paged_case({128, 2, 3, 32, 31, {900, 64}, 0}, 4);
}

TEST(CudaAttention, PagedLargeGroups) {
  SS_REQUIRE_GPU();
  run_paged_case({128, 16, 1, 16, 0, {520, 30}, 0}, 5);  // two register passes of 8 heads
  run_paged_case({64, 12, 2, 16, 20, {520, 30}, 0}, 6);
  run_paged_case({32, 9, 1, 16, 0, {100, 7}, 0}, 7);
}

TEST(CudaAttention, PagedSinglePartitionAndSpareCapacity) {
  SS_REQUIRE_GPU();
  // All contexts fit one partition: the kernel writes out directly.
  run_paged_case({128, 7, 2, 16, 0, {200, 1, 17, 256}, 0}, 8);
  run_paged_case({64, 2, 2, 16, 10, {200, 1, 17}, 0}, 9);
  // A graph sized for longer contexts than the batch has: empty partitions.
  run_paged_case({128, 4, 2, 16, 0, {200, 1, 17}, 700}, 10);
  run_paged_case({16, 2, 2, 16, 7, {300, 5}, 1000}, 11);
}

// Small partitions (what small-batch decode uses): the same attention.
TEST(CudaAttention, PagedSmallPartitions) {
  SS_REQUIRE_GPU();
  uint32_t seed = 300;
  for (int32_t partition : {32, 64, 128}) {
    run_paged_case({128, 7, 2, 16, 0, {1000, 1, 17, 300, 64, 65}, 0, partition}, seed++);
    run_paged_case({64, 4, 2, 16, 100, {640, 33, 129}, 200, partition}, seed++);
    run_paged_case({32, 2, 1, 5, 0, {97, 31, 32}, 0, partition}, seed++);
  }
  EXPECT_EQ(paged_attention_partition_size(1, 4), 64);
  EXPECT_EQ(paged_attention_partition_size(256, 4), kPartitionSize);
}

// The run kernel (verify path): several rows of one sequence per CTA, causal
// among themselves, windows per row, mixed with decode rows and prefill
// chunks, single and split-K partitions.
TEST(CudaAttention, RunsMatchCpu) {
  SS_REQUIRE_GPU();
  uint32_t seed = 500;
  for (int32_t hd : {64, 128}) {
    for (int32_t group : {1, 7, 16}) {
      for (int32_t window : {0, 3, 100}) {
        for (int32_t rows : {2, 5, 17}) {
          const int32_t n_kv = 1 + static_cast<int32_t>(seed % 2);
          run_paged_case(
              {hd, group, n_kv, 16, window, {1000, 9, 300, 257, 64, 520}, 0, kPartitionSize, rows},
              seed++);
        }
      }
    }
  }
  // Small partitions, one partition, spare graph capacity, odd block sizes.
  run_paged_case({128, 7, 4, 16, 0, {1000, 40, 300, 2000}, 0, 64, 5}, seed++);
  run_paged_case({128, 7, 4, 16, 50, {1000, 40, 300}, 0, 128, 9}, seed++);
  run_paged_case({64, 4, 2, 5, 0, {200, 30, 17, 100}, 0, kPartitionSize, 5}, seed++);
  run_paged_case({128, 2, 2, 16, 0, {200, 30, 17}, 700, kPartitionSize, 5}, seed++);
  // The run kernel's own longer partitions (split-K partials of 512 / 1024
  // keys; contexts ending mid-tile and mid-partition; partitions of fewer
  // tiles than the pipeline has stages at 64).
  for (int32_t run_partition : {512, 1024}) {
    run_paged_case(
        {128, 7, 4, 16, 0, {3000, 40, 1100, 2049, 700, 1025}, 0, kPartitionSize, 5, run_partition},
        seed++);
    run_paged_case({64, 4, 2, 16, 100, {2100, 33, 1500}, 300, 128, 9, run_partition}, seed++);
    run_paged_case({128, 1, 2, 5, 0, {1500, 9, 130}, 0, 64, 17, run_partition}, seed++);
  }
  // A capped grid: each CTA accumulates partitions z, z + grid, ... into
  // one split-K entry (1, 2 or 3 CTAs for up to 14 partitions, some of them
  // empty: spare capacity; one CTA writes the output itself), decode rows
  // (runs of one) as a decode graph has them, and verify runs.
  for (int32_t grid_parts : {1, 2, 3}) {
    run_paged_case({64,
                    7,
                    2,
                    16,
                    0,
                    {3000, 40, 1100, 2049, 700, 1025},
                    4000,
                    kPartitionSize,
                    1,
                    512,
                    grid_parts},
                   seed++);
    run_paged_case({128, 7, 4, 16, 100, {2100, 33, 1500}, 300, kPartitionSize, 5, 256, grid_parts},
                   seed++);
  }
  // The sparse draft's decode graph: 1024-key partitions, 8 CTAs along them,
  // contexts just past one partition (sink + window + a few), so each decode
  // row deals its tiles evenly over its 2 partitions; a 9-partition row
  // (more than the 8 CTAs) keeps 1024-key partitions. Verify runs beside.
  for (int32_t rows : {1, 5}) {
    run_paged_case(
        {64, 7, 2, 16, 0, {1088, 1089, 1025, 1100, 8300, 40}, 7000, kPartitionSize, rows, 1024, 8},
        seed++);
  }
  // An eager step's grid: about one wave of CTAs, at least one a run head.
  EXPECT_EQ(run_attention_eager_grid_parts(64, 4), 1);
  EXPECT_EQ(run_attention_eager_grid_parts(32, 4), 2);
  EXPECT_EQ(run_attention_eager_grid_parts(8, 4), 8);
  EXPECT_EQ(run_attention_eager_grid_parts(1024, 8), 1);
  EXPECT_EQ(run_attention_eager_grid_parts(1, 2), 128);
  EXPECT_EQ(run_attention_graph_grid_parts(64, 2), 8);
  EXPECT_EQ(run_attention_graph_grid_parts(1, 4), 256);
}

AttnCase split_case(int32_t hd, int32_t group, int32_t n_kv, int32_t block, int32_t window,
                    std::vector<int32_t> lens, int32_t extra, int32_t rows, int32_t split) {
  AttnCase c{hd, group, n_kv, block, window, std::move(lens), extra, kPartitionSize, rows};
  c.run_split = split;
  return c;
}

// The run kernel's run-time split (flash-decoding: each CTA an even range of
// the run's keys in whole tiles, every CTA an entry, empty ones marked):
// decode rows (runs of one, the batch-1 case it is for) and verify runs,
// odd lengths ending mid-tile, shuffled blocks of odd sizes, GQA 1-16, head
// dims 64 / 128, windows, graph capacity far past the contexts (most CTAs
// empty), splits of 2 up to more CTAs than tiles, and run_attention_split's
// own choice. Outputs and workspace are poisoned (NaN) first.
TEST(CudaAttention, RunTimeSplitMatchesCpu) {
  SS_REQUIRE_GPU();
  uint32_t seed = 900;
  for (int32_t hd : {64, 128}) {
    for (int32_t group : {1, 7, 16}) {
      for (int32_t rows : {1, 5}) {
        for (int32_t split : {2, 7, 40}) {
          const int32_t n_kv = 1 + static_cast<int32_t>(seed % 3);
          const int32_t window = seed % 4 == 0 ? 100 : 0;
          run_paged_case(
              split_case(hd, group, n_kv, 16, window, {1000, 9, 300, 257, 64, 65}, 0, rows, split),
              seed++);
        }
      }
    }
  }
  // Odd block sizes, one-slot sequences, spare capacity (most CTAs empty).
  run_paged_case(split_case(128, 7, 4, 5, 0, {613, 1, 2, 129}, 3000, 1, 64), seed++);
  run_paged_case(split_case(64, 7, 2, 3, 31, {577, 1, 63}, 1000, 1, 16), seed++);
  run_paged_case(split_case(128, 4, 2, 16, 0, {4100, 33}, 0, 1, 5), seed++);  // ~832-key ranges
  // run_attention_split's choice for batch-1-like shapes (7B: 4 kv heads,
  // 0.5B: 2) at short and long contexts.
  run_paged_case(split_case(128, 7, 4, 16, 0, {577}, 63, 1, -1), seed++);
  run_paged_case(split_case(64, 7, 2, 16, 0, {8193}, 0, 1, -1), seed++);
  run_paged_case(split_case(64, 7, 2, 16, 0, {700, 1200}, 2000, 1, -1), seed++);
}

// The host-side choice of the run-time split.
TEST(CudaAttention, RunTimeSplitChoice) {
  EXPECT_EQ(run_attention_split(1, 4, 640), 10);   // capped at the capacity's tiles
  EXPECT_EQ(run_attention_split(1, 4, 4224), 32);  // capped per group
  EXPECT_EQ(run_attention_split(1, 2, 8192), 32);
  EXPECT_EQ(run_attention_split(8, 2, 8192), 16);  // 256 CTAs in all
  EXPECT_EQ(run_attention_split(7, 4, 8192), 10);
  EXPECT_EQ(run_attention_split(8, 4, 8192), 0);  // 32 groups: fixed partitions
  EXPECT_EQ(run_attention_split(2, 2, 8192), 32);
  EXPECT_EQ(run_attention_split(1, 4, 65536), 64);      // ranges of at most 1024 keys
  EXPECT_EQ(run_attention_split(1, 1, 1 << 20), 1024);  // ranges of at most 1024 keys
  EXPECT_EQ(run_attention_split(16, 4, 8192), 0);       // enough groups: fixed partitions
  EXPECT_EQ(run_attention_split(1, 4, 64), 0);          // one tile: one CTA
  EXPECT_EQ(run_attention_split(1, 4, 100), 2);
}

// The host-side run split (no GPU needed).
TEST(CudaAttention, RunSplit) {
  // seq: 0 0 0 1 1 2 2 2 2 2 0; slot: 5 6 7 3 9 0 1 2 3 4 8
  const std::vector<int32_t> seq = {0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 0};
  const std::vector<int32_t> slot = {5, 6, 7, 3, 9, 0, 1, 2, 3, 4, 8};
  std::vector<int32_t> run(seq.size(), -7);
  // group 16: at most 4 rows per run.
  EXPECT_EQ(paged_attention_runs(seq.data(), slot.data(), 11, 16, run.data()), 4);
  EXPECT_EQ(run, (std::vector<int32_t>{3, 0, 0, 1, 1, 4, 0, 0, 0, 1, 1}));
  EXPECT_EQ(paged_attention_runs(seq.data(), slot.data(), 11, 1, run.data()), 5);
  EXPECT_EQ(run, (std::vector<int32_t>{3, 0, 0, 1, 1, 5, 0, 0, 0, 0, 1}));
  EXPECT_EQ(paged_attention_runs(slot.data(), slot.data(), 1, 7, run.data()), 1);
}

}  // namespace
}  // namespace specstack::cuda

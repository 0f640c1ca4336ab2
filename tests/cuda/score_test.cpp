// cuda::score_tokens against its CPU twin specprefill::score_tokens: the
// ALGORITHM.md worked example, then random draft-like setups (GQA, several
// head_dims, steps, prompt lengths and pooling widths) whose scored keys sit
// after a cached prefix in shuffled physical blocks of a paged bf16 cache.
// Every slot the kernel must not read (the prefix, past slot_end, unused
// blocks, the skipped sliding layer) holds NaN, so a wrong gather shows up as
// a non-finite importance.
#include "cuda/score.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "specprefill/attention_capture.h"
#include "specprefill/prompt_keys.h"
#include "specprefill/scorer.h"
#include "specprefill/selector.h"

namespace specstack::cuda {
namespace {

namespace ct = ::specstack::cuda::testing;

// fp32 on both sides from the same inputs; only summation order, FMA
// contraction and exp's last ulps differ.
constexpr double kScoreTolerance = 1e-3;

// One scoring problem on the host: a model of n_layers whose layer 1 is
// sliding-window (not scored), keys in logical slot order.
struct Problem {
  int n_layers = 3;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 0;
  int n_steps = 0;
  int pool_kernel = 13;
  int block_size = 16;
  int slot_begin = 0;  // the cached prefix: slots [0, slot_begin) are not scored
  int slot_end = 0;
  int n_slots = 0;                   // slots the block table covers; > slot_end
  int n_blocks = 0;                  // physical blocks in the pool; > the table's length
  std::vector<int32_t> block_table;  // [n_slots / block_size] shuffled physical ids
  std::vector<int32_t> scored_layers = {0, 2};
  std::vector<float> keys;   // [n_layers, n_kv_heads, n_slots, head_dim] bf16-rounded
  AttentionCapture capture;  // queries [n_layers, n_steps, n_heads, head_dim]

  int n_tokens() const { return slot_end - slot_begin; }
};

struct Shape {
  int head_dim, n_steps, n_tokens, pool_kernel;
  int n_heads = 4;
  int n_kv_heads = 2;
  int n_layers = 3;  // layer 1 is sliding-window (not scored), every other layer is scored
};

Problem make_problem(const Shape& shape, uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.n_layers = shape.n_layers;
  p.scored_layers.clear();
  for (int l = 0; l < p.n_layers; ++l) {
    if (l != 1) p.scored_layers.push_back(l);
  }
  p.n_heads = shape.n_heads;
  p.n_kv_heads = shape.n_kv_heads;
  p.head_dim = shape.head_dim;
  p.n_steps = shape.n_steps;
  p.pool_kernel = shape.pool_kernel;
  p.slot_begin = 1 + static_cast<int>(rng() % 40);  // not block-aligned in general
  p.slot_end = p.slot_begin + shape.n_tokens;
  const int n_table = (p.slot_end + 5) / p.block_size + 1;
  p.n_slots = n_table * p.block_size;
  p.n_blocks = n_table + 3;
  std::vector<int32_t> ids(static_cast<size_t>(p.n_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  p.block_table.assign(ids.begin(), ids.begin() + n_table);
  // Values in [-2, 2): peaked enough that pooling and the max over heads matter.
  p.keys = ct::random_values(
      rng, static_cast<size_t>(p.n_layers) * p.n_kv_heads * p.n_slots * p.head_dim, -2.0f, 2.0f);
  p.capture = AttentionCapture::zeros(p.n_layers, p.n_steps, p.n_heads, p.head_dim);
  p.capture.queries = ct::random_values(rng, p.capture.queries.size(), -2.0f, 2.0f);
  p.capture.layer_window.assign(static_cast<size_t>(p.n_layers), 0);
  p.capture.layer_window[1] = 512;  // the CPU skips layer 1; the GPU is not given it
  return p;
}

// Layer `layer`'s paged cache [n_blocks, block_size, n_kv_heads, head_dim]:
// the scored slots hold the keys, everything else NaN.
std::vector<bf16> paged_cache(const Problem& p, int layer, bool scored) {
  const size_t row = static_cast<size_t>(p.n_kv_heads) * p.head_dim;
  std::vector<bf16> cache(static_cast<size_t>(p.n_blocks) * p.block_size * row,
                          __float2bfloat16(NAN));
  if (!scored) return cache;
  for (int slot = p.slot_begin; slot < p.slot_end; ++slot) {
    const size_t phys = static_cast<size_t>(p.block_table[slot / p.block_size]) * p.block_size +
                        slot % p.block_size;
    for (int kvh = 0; kvh < p.n_kv_heads; ++kvh) {
      for (int d = 0; d < p.head_dim; ++d) {
        const size_t src =
            ((static_cast<size_t>(layer) * p.n_kv_heads + kvh) * p.n_slots + slot) * p.head_dim + d;
        cache[phys * row + static_cast<size_t>(kvh) * p.head_dim + d] =
            __float2bfloat16(p.keys[src]);
      }
    }
  }
  return cache;
}

// The device layout of the queries: [n_steps, n_layers, n_heads * head_dim].
std::vector<float> device_queries(const AttentionCapture& c) {
  const size_t step_floats = static_cast<size_t>(c.n_heads * c.head_dim);
  std::vector<float> out(c.queries.size());
  for (int64_t t = 0; t < c.n_steps; ++t) {
    for (int64_t l = 0; l < c.n_layers; ++l) {
      std::copy(c.query(l, t), c.query(l, t) + step_floats,
                out.begin() + static_cast<ptrdiff_t>((t * c.n_layers + l) * step_floats));
    }
  }
  return out;
}

// Device-side state of one problem; score() may run several times on it.
class GpuScorer {
 public:
  explicit GpuScorer(const Problem& p) : p_(p) {
    for (int l = 0; l < p.n_layers; ++l) {
      const bool scored =
          std::find(p.scored_layers.begin(), p.scored_layers.end(), l) != p.scored_layers.end();
      caches_.push_back(ct::upload(paged_cache(p, l, scored)));
    }
    for (auto& cache : caches_) cache_ptrs_.push_back(cache.data());
    queries_ = ct::upload(device_queries(p.capture));
    block_table_ = ct::upload(p.block_table);
    workspace_.resize(score_workspace_floats(p.n_steps, p.n_heads, p.n_tokens()));
    workspace_.fill_bytes(0xFF);  // NaN: every read of it must follow a write
    importance_.resize(static_cast<size_t>(p.n_tokens()));
  }

  std::vector<float> score() {
    importance_.fill_bytes(0xFF);
    ScoreArgs args;
    args.queries = queries_.data();
    args.n_steps = p_.n_steps;
    args.n_layers = p_.n_layers;
    args.n_heads = p_.n_heads;
    args.n_kv_heads = p_.n_kv_heads;
    args.head_dim = p_.head_dim;
    args.scored_layers = p_.scored_layers.data();
    args.n_scored = static_cast<int32_t>(p_.scored_layers.size());
    args.k_caches = cache_ptrs_.data();
    args.block_table = block_table_.data();
    args.block_size = p_.block_size;
    args.slot_begin = p_.slot_begin;
    args.slot_end = p_.slot_end;
    args.pool_kernel = p_.pool_kernel;
    args.importance = importance_.data();
    args.workspace = workspace_.data();
    score_tokens(args, nullptr);
    SS_CUDA_CHECK(cudaDeviceSynchronize());
    return importance_.download();
  }

 private:
  const Problem& p_;
  std::vector<DeviceBuffer<bf16>>
      caches_;                           // per layer [n_blocks, block_size, n_kv_heads, head_dim]
  std::vector<const bf16*> cache_ptrs_;  // [n_layers]
  DeviceBuffer<float> queries_;          // [n_steps, n_layers, n_heads * head_dim]
  DeviceBuffer<int32_t> block_table_;    // [n_slots / block_size]
  DeviceBuffer<float> workspace_;
  DeviceBuffer<float> importance_;  // [n_tokens]
};

std::vector<float> cpu_importance(const Problem& p) {
  DensePromptKeys view(p.keys.data(), p.n_layers, p.n_kv_heads, p.n_slots, p.head_dim, p.slot_begin,
                       p.slot_end);
  auto importance =
      specstack::score_tokens(p.capture, view, ScoreParams{.pool_kernel = p.pool_kernel});
  EXPECT_TRUE(importance.ok()) << importance.message();
  return importance.ok() ? *importance : std::vector<float>(static_cast<size_t>(p.n_tokens()));
}

// The top-20% chunk pick agrees unless the CPU's cut falls on a near tie.
void expect_same_selection(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  const SelectionOptions options{.keep_pct = 0.2, .chunk = 32, .force_first_last = false};
  auto cpu_sel = select_chunks(cpu, options);
  auto gpu_sel = select_chunks(gpu, options);
  ASSERT_TRUE(cpu_sel.ok()) << cpu_sel.message();
  ASSERT_TRUE(gpu_sel.ok()) << gpu_sel.message();
  std::vector<float> sorted = cpu_sel->chunk_scores;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  const size_t budget = static_cast<size_t>(cpu_sel->n_budget_chunks);
  if (budget < sorted.size() && sorted[budget - 1] - sorted[budget] <= 1e-4f * sorted[budget - 1]) {
    return;  // near tie at the cut
  }
  EXPECT_EQ(gpu_sel->kept_chunks, cpu_sel->kept_chunks);
}

void check_shape(const Shape& shape, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << shape.head_dim << " steps " << shape.n_steps << " tokens "
               << shape.n_tokens << " pool " << shape.pool_kernel << " heads " << shape.n_heads
               << "/" << shape.n_kv_heads << " seed " << seed);
  const Problem p = make_problem(shape, seed);
  GpuScorer gpu(p);
  const std::vector<float> got = gpu.score();
  const std::vector<float> want = cpu_importance(p);
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) {
    ASSERT_TRUE(std::isfinite(got[j])) << "token " << j << " = " << got[j];
    ASSERT_GE(got[j], 0.0f) << "token " << j;
  }
  EXPECT_LE(ct::relative_error(got, want), kScoreTolerance);
  expect_same_selection(got, want);

  // Again on the same (now dirty) workspace: the running max restarts from 0
  // and no atomics are involved, so the result is bit-identical.
  const std::vector<float> again = gpu.score();
  ASSERT_EQ(again.size(), got.size());
  EXPECT_EQ(std::memcmp(again.data(), got.data(), got.size() * sizeof(float)), 0);
}

TEST(ScoreCudaTest, WorkedExampleFromAlgorithmDoc) {
  SS_REQUIRE_GPU();
  // One layer, H = 4, Hkv = 2, S = 3, D = 2 (a head_dim below the float4
  // width: the padded path), one step, no pooling, no prefix, one block.
  Problem p;
  p.n_layers = 1;
  p.head_dim = 2;
  p.n_steps = 1;
  p.pool_kernel = 1;
  p.block_size = 4;
  p.slot_begin = 0;
  p.slot_end = 3;
  p.n_slots = 4;
  p.n_blocks = 2;
  p.block_table = {1};
  p.scored_layers = {0};
  // [layer 0, kv head, slot 0..3, d]; slot 3 is never scored.
  p.keys = {1, 0, 0, 1, 1, 1, 0, 0,  //
            1, 2, 0, 2, 2, 2, 0, 0};
  p.capture = AttentionCapture::zeros(1, 1, 4, 2);
  p.capture.queries = {1, 0, 0, 1, 1, 1, 2, 1};
  GpuScorer gpu(p);
  const std::vector<float> got = gpu.score();
  ASSERT_EQ(got.size(), 3u);
  const double a = 1.0 / (2.0 + std::exp(-1.0 / std::sqrt(2.0)));
  const double b = 1.0 / (1.0 + std::exp(-std::sqrt(2.0)) + std::exp(-2.0 * std::sqrt(2.0)));
  EXPECT_NEAR(got[0], a, 1e-6);
  EXPECT_NEAR(got[1], a, 1e-6);
  EXPECT_NEAR(got[2], b, 1e-6);
}

TEST(ScoreCudaTest, MatchesCpuTwinAcrossShapes) {
  SS_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int head_dim : {32, 64}) {
    for (int n_steps : {1, 4}) {
      for (int n_tokens : {1, 13, 300, 2000}) {
        for (int pool_kernel : {13, 1}) {
          check_shape(Shape{head_dim, n_steps, n_tokens, pool_kernel}, seed++);
        }
      }
    }
  }
}

TEST(ScoreCudaTest, MatchesCpuTwinOtherHeadDims) {
  SS_REQUIRE_GPU();
  // 16 and 128 (vectorised key loads), 256 (above the 48 KB shared-memory
  // default), 20 (not a multiple of 8: scalar key loads).
  uint32_t seed = 200;
  for (int head_dim : {16, 128, 256, 20}) {
    for (int n_tokens : {13, 300}) {
      check_shape(Shape{head_dim, 4, n_tokens, 13}, seed++);
    }
  }
}

TEST(ScoreCudaTest, MatchesCpuTwinOtherHeadLayouts) {
  SS_REQUIRE_GPU();
  // 12 heads / 2 kv heads x 5 steps = 30 query rows per kv head (two row
  // chunks, the second partly filled); MHA; MQA with 16 rows per kv head.
  check_shape(Shape{.head_dim = 64,
                    .n_steps = 5,
                    .n_tokens = 777,
                    .pool_kernel = 13,
                    .n_heads = 12,
                    .n_kv_heads = 2},
              300);
  check_shape(Shape{.head_dim = 32,
                    .n_steps = 1,
                    .n_tokens = 129,
                    .pool_kernel = 13,
                    .n_heads = 8,
                    .n_kv_heads = 8},
              301);
  check_shape(Shape{.head_dim = 128,
                    .n_steps = 4,
                    .n_tokens = 65,
                    .pool_kernel = 5,
                    .n_heads = 4,
                    .n_kv_heads = 1},
              302);
}

TEST(ScoreCudaTest, LongPrompt) {
  SS_REQUIRE_GPU();
  check_shape(Shape{64, 8, 20000, 13}, 400);
}

TEST(ScoreCudaTest, ManyScoredLayersInSeveralLaunches) {
  SS_REQUIRE_GPU();
  // 19 scored layers of a 20-layer draft: launches of up to 8 layers each
  // (8 + 8 + 3), the pool kernel's running max carried across them.
  check_shape(Shape{.head_dim = 64,
                    .n_steps = 8,
                    .n_tokens = 1500,
                    .pool_kernel = 13,
                    .n_heads = 14,
                    .n_kv_heads = 2,
                    .n_layers = 20},
              500);
}

}  // namespace
}  // namespace specstack::cuda

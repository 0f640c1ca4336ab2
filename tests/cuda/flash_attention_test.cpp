// flash_attention against CpuBackend::attention: one sequence on shuffled
// physical blocks (block_size 16 unless said), full causal prefills of 1 to
// 1000 rows (around the 128-row CTA and 64-key tile edges), chunks that start
// mid-sequence (also with keys after the chunk), sparse positions, sliding
// windows (including ones that skip many leading tiles, positions in no
// order, and rows that see no key at all), head_dim 64 and 128, GQA groups 1,
// 4 and 7. The GPU cache holds NaN in every slot the sequence does not own,
// so a read past n_keys or outside the block table shows up; outputs are
// poisoned (0xFF) and the padding between rows must stay untouched.
#include "cuda/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/attention_batch.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"

namespace specstack::cuda {
namespace {

using testing::kBf16Tolerance;
using testing::random_values;
using testing::relative_error;
using testing::to_bf16;
using testing::to_f32;
using testing::upload;

enum class Positions {
  kDense,     // pos = slot
  kSparse,    // pos = 5 * slot + 2 (SpecPrefill keeps a subset of positions)
  kShuffled,  // pos = a random permutation of 0 .. 2 * n_keys: no order at all
};

struct FlashCase {
  int32_t head_dim = 128, group = 1, n_kv_heads = 1;
  int32_t n_rows = 1;      // queries in slots first_slot .. first_slot + n_rows - 1
  int32_t first_slot = 0;  // 0 = full prefill
  int32_t extra_keys = 0;  // n_keys = last query slot + 1 + extra_keys
  Positions positions = Positions::kDense;
  int32_t window = 0;
  int32_t block_size = 16;
  bool blind_rows = false;  // every third query's position is far ahead: it sees no key
};

void run_flash_case(const FlashCase& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << c.head_dim << " group " << c.group << " kv_heads " << c.n_kv_heads
               << " rows " << c.n_rows << " first_slot " << c.first_slot << " extra_keys "
               << c.extra_keys << " positions " << static_cast<int>(c.positions) << " window "
               << c.window << " block " << c.block_size << " seed " << seed);
  std::mt19937 rng(seed);
  const int32_t hd = c.head_dim, n_heads = c.group * c.n_kv_heads, bs = c.block_size;
  const int32_t n_keys = c.first_slot + c.n_rows + c.extra_keys;
  const int32_t kv_width = c.n_kv_heads * hd;

  // Paged cache: the sequence's blocks shuffled among spare ones.
  const int32_t n_logical = (n_keys + bs - 1) / bs;
  const int32_t n_blocks = n_logical + 3;
  std::vector<int32_t> physical(static_cast<size_t>(n_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);
  const std::vector<int32_t> table(physical.begin(), physical.begin() + n_logical);
  auto flat = [&](int32_t slot) { return table[slot / bs] * bs + slot % bs; };

  const size_t n_slots = static_cast<size_t>(n_blocks) * bs;
  const std::vector<float> k = random_values(rng, n_slots * kv_width);  // [n_blocks, bs, kv, hd]
  const std::vector<float> v = random_values(rng, n_slots * kv_width);
  std::vector<int32_t> slot_pos(n_slots, -7);  // [n_blocks, bs]; junk where unused
  std::vector<int32_t> perm(static_cast<size_t>(2 * n_keys));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int32_t j = 0; j < n_keys; ++j) {
    slot_pos[flat(j)] = c.positions == Positions::kDense    ? j
                        : c.positions == Positions::kSparse ? 5 * j + 2
                                                            : perm[j];
  }

  // Queries: slot first_slot + r at its own key's position (or far ahead).
  const int32_t n_rows = c.n_rows;
  std::vector<int32_t> q_slot(n_rows), q_pos(n_rows), q_seq(n_rows, 0);
  for (int32_t r = 0; r < n_rows; ++r) {
    q_slot[r] = c.first_slot + r;
    q_pos[r] = slot_pos[flat(q_slot[r])] + (c.blind_rows && r % 3 == 1 ? 1 << 20 : 0);
  }
  // q rows padded as in a fused QKV buffer; wide q values spread the scores.
  const int64_t q_stride = int64_t{n_heads + 2 * c.n_kv_heads} * hd;
  const std::vector<float> q_full = random_values(rng, n_rows * q_stride, -4.0f, 4.0f);
  const int64_t row = int64_t{n_heads} * hd;
  const int64_t out_stride = row + 8;

  // CPU twin on the same bf16-rounded values (f32 cache).
  Tensor q = Tensor::zeros(DType::kF32, {n_rows, row});
  for (int32_t r = 0; r < n_rows; ++r) {
    std::copy_n(q_full.begin() + r * q_stride, row, q.f32() + r * row);
  }
  KvLayerView layer;
  layer.k = Tensor::zeros(DType::kF32, {n_blocks, bs, c.n_kv_heads, hd});
  layer.v = Tensor::zeros(DType::kF32, {n_blocks, bs, c.n_kv_heads, hd});
  layer.positions = Tensor::zeros(DType::kI32, {n_blocks, bs});
  std::copy(k.begin(), k.end(), layer.k.f32());
  std::copy(v.begin(), v.end(), layer.v.f32());
  std::copy(slot_pos.begin(), slot_pos.end(), layer.positions.data<int32_t>());
  layer.block_size = bs;
  layer.n_kv_heads = c.n_kv_heads;
  layer.head_dim = hd;
  const std::vector<int32_t> seq_n_slots = {n_keys};
  AttentionBatch batch;
  batch.token_seq = q_seq;
  batch.token_slot = q_slot;
  batch.token_pos = q_pos;
  batch.block_tables.emplace_back(table.data(), table.size());
  batch.seq_n_slots = seq_n_slots;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const AttentionParams params{n_heads, c.n_kv_heads, hd, scale, c.window};
  Tensor cpu_out = Tensor::zeros(DType::kF32, {n_rows, row});
  CpuBackend backend(CpuBackendOptions{2});
  backend.attention(q, batch, layer, params, cpu_out);

  // GPU: NaN in every slot the sequence does not own (past n_keys, spare blocks).
  std::vector<__nv_bfloat16> k_dev = to_bf16(k), v_dev = to_bf16(v);
  std::vector<bool> owned(n_slots, false);
  for (int32_t j = 0; j < n_keys; ++j) owned[flat(j)] = true;
  for (size_t s = 0; s < n_slots; ++s) {
    if (owned[s]) continue;
    for (int32_t e = 0; e < kv_width; ++e) {
      k_dev[s * kv_width + e] = __float2bfloat16(NAN);
      v_dev[s * kv_width + e] = __float2bfloat16(NAN);
    }
  }
  auto d_q = upload(to_bf16(q_full));
  auto d_k = upload(k_dev);
  auto d_v = upload(v_dev);
  auto d_pos = upload(slot_pos);
  auto d_table = upload(table);
  auto d_slot = upload(q_slot);
  auto d_qpos = upload(q_pos);
  DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(n_rows) * out_stride);
  d_out.fill_bytes(0xFF);

  FlashAttentionArgs args;
  args.q = d_q.data();
  args.q_stride = q_stride;
  args.q_slot = d_slot.data();
  args.q_pos = d_qpos.data();
  args.n_rows = n_rows;
  args.k_cache = d_k.data();
  args.v_cache = d_v.data();
  args.slot_positions = d_pos.data();
  args.block_table = d_table.data();
  args.block_size = bs;
  args.n_keys = n_keys;
  args.n_heads = n_heads;
  args.n_kv_heads = c.n_kv_heads;
  args.head_dim = hd;
  args.scale = scale;
  args.sliding_window = c.window;
  args.out = d_out.data();
  args.out_stride = out_stride;
  ASSERT_TRUE(flash_attention_supported(hd));
  flash_attention(args, nullptr);
  SS_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<__nv_bfloat16> gpu_raw = d_out.download();
  const std::vector<float> gpu_full = to_f32(gpu_raw);

  // Per row, so one wrong query cannot hide in the overall norm; rows that see
  // nothing must be exact zeros (relative_error of a zero reference is ||gpu||).
  std::vector<float> gpu_all, cpu_all;
  int64_t padding_touched = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const std::vector<float> gpu(gpu_full.begin() + r * out_stride,
                                 gpu_full.begin() + r * out_stride + row);
    const std::vector<float> cpu(cpu_out.f32() + r * row, cpu_out.f32() + (r + 1) * row);
    EXPECT_LE(relative_error(gpu, cpu), kBf16Tolerance) << "row " << r << " slot " << q_slot[r];
    gpu_all.insert(gpu_all.end(), gpu.begin(), gpu.end());
    cpu_all.insert(cpu_all.end(), cpu.begin(), cpu.end());
    for (int64_t e = row; e < out_stride; ++e) {
      uint16_t bits;
      std::memcpy(&bits, &gpu_raw[r * out_stride + e], sizeof(bits));
      padding_touched += bits != 0xFFFF;
    }
  }
  EXPECT_LE(relative_error(gpu_all, cpu_all), kBf16Tolerance);
  EXPECT_EQ(padding_touched, 0) << "wrote outside [row, row + n_heads * head_dim)";
}

TEST(CudaFlashAttention, Supported) {
  SS_REQUIRE_GPU();
  EXPECT_TRUE(flash_attention_supported(64));
  EXPECT_TRUE(flash_attention_supported(128));
  EXPECT_FALSE(flash_attention_supported(32));
  EXPECT_FALSE(flash_attention_supported(256));
}

TEST(CudaFlashAttention, FullCausalPrefill) {
  SS_REQUIRE_GPU();
  uint32_t seed = 1;
  for (int32_t hd : {64, 128}) {
    for (int32_t group : {1, 4, 7}) {
      for (int32_t n : {1, 63, 64, 200, 1000}) {
        FlashCase c;
        c.head_dim = hd;
        c.group = group;
        c.n_kv_heads = group == 7 ? 1 : 2;
        c.n_rows = n;
        run_flash_case(c, seed++);
      }
    }
  }
}

TEST(CudaFlashAttention, ChunkMidSequence) {
  SS_REQUIRE_GPU();
  uint32_t seed = 100;
  for (int32_t hd : {64, 128}) {
    for (int32_t group : {1, 4, 7}) {
      FlashCase c;
      c.head_dim = hd;
      c.group = group;
      c.n_kv_heads = group == 1 ? 3 : 1;
      c.n_rows = 77;
      c.first_slot = 300;
      run_flash_case(c, seed++);
      c.n_rows = 129;  // crosses a CTA edge
      c.first_slot = 333;
      c.extra_keys = 150;  // keys after the chunk exist and must stay invisible
      run_flash_case(c, seed++);
    }
  }
}

TEST(CudaFlashAttention, SparsePositionsAndSlidingWindow) {
  SS_REQUIRE_GPU();
  uint32_t seed = 200;
  for (int32_t hd : {64, 128}) {
    for (int32_t group : {1, 4, 7}) {
      for (int32_t window : {0, 100}) {
        FlashCase c;
        c.head_dim = hd;
        c.group = group;
        c.n_kv_heads = group == 7 ? 1 : 2;
        c.positions = Positions::kSparse;
        c.window = window;
        c.n_rows = 150;
        c.first_slot = 333;
        run_flash_case(c, seed++);
        c.n_rows = 700;  // full prefill: the window cuts inside and across tiles
        c.first_slot = 0;
        run_flash_case(c, seed++);
      }
    }
  }
}

TEST(CudaFlashAttention, WindowSkipsLeadingTiles) {
  SS_REQUIRE_GPU();
  // A late chunk with a short window: thousands of leading keys (several
  // rounds of the skip scan) are outside every row's window.
  uint32_t seed = 300;
  for (int32_t hd : {64, 128}) {
    for (int32_t window : {1, 64, 100, 1000}) {
      FlashCase c;
      c.head_dim = hd;
      c.group = 4;
      c.n_kv_heads = 1;
      c.window = window;
      c.n_rows = 130;
      c.first_slot = 5000;
      run_flash_case(c, seed++);
    }
  }
  FlashCase odd;  // block size not a power of two, dense window across the whole prefill
  odd.head_dim = 128;
  odd.group = 2;
  odd.n_kv_heads = 2;
  odd.window = 64;
  odd.n_rows = 600;
  odd.block_size = 7;
  run_flash_case(odd, seed++);
}

TEST(CudaFlashAttention, UnorderedPositionsAndBlindRows) {
  SS_REQUIRE_GPU();
  // Positions in no order: tile skipping must rely on the positions it reads,
  // never on them ascending. Blind rows (position far ahead of every key)
  // see nothing under the window and must come out as zeros.
  uint32_t seed = 400;
  for (int32_t hd : {64, 128}) {
    for (int32_t window : {0, 300, 2500}) {
      FlashCase c;
      c.head_dim = hd;
      c.group = 7;
      c.n_kv_heads = 1;
      c.positions = Positions::kShuffled;
      c.window = window;
      c.n_rows = 200;
      c.first_slot = 2900;
      run_flash_case(c, seed++);
      c.positions = Positions::kSparse;
      c.blind_rows = true;
      run_flash_case(c, seed++);
    }
  }
}

}  // namespace
}  // namespace specstack::cuda

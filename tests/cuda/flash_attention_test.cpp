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
#include <vector>

#include "cuda_test_util.h"
#include "flash_attention_problem.h"

namespace specstack::cuda {
namespace {

using namespace flash_test;
using testing::kBf16Tolerance;
using testing::relative_error;

// The problem (paged cache with NaN in unowned slots, queries, CPU twin) is
// flash_attention_problem.h's, shared with the Hopper and FP8 tests.
void run_flash_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << c.head_dim << " group " << c.group << " kv_heads " << c.n_kv_heads
               << " rows " << c.n_rows << " first_slot " << c.first_slot << " extra_keys "
               << c.extra_keys << " positions " << static_cast<int>(c.positions) << " window "
               << c.window << " block " << c.block_size << " seed " << seed);
  const Problem pb(c, seed);
  const std::vector<float> cpu_all = pb.cpu();
  ASSERT_TRUE(flash_attention_supported(c.head_dim));
  const std::vector<__nv_bfloat16> raw =
      pb.run([](const FlashAttentionArgs& a) { flash_attention(a, nullptr); });
  int64_t padding_touched = 0;
  const std::vector<float> gpu_all = rows_of(pb, raw, &padding_touched);

  // Per row, so one wrong query cannot hide in the overall norm; rows that see
  // nothing must be exact zeros (relative_error of a zero reference is ||gpu||).
  for (int32_t r = 0; r < c.n_rows; ++r) {
    const std::vector<float> gpu(gpu_all.begin() + r * pb.row, gpu_all.begin() + (r + 1) * pb.row);
    const std::vector<float> cpu(cpu_all.begin() + r * pb.row, cpu_all.begin() + (r + 1) * pb.row);
    EXPECT_LE(relative_error(gpu, cpu), kBf16Tolerance) << "row " << r << " slot " << pb.q_slot[r];
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
        Case c;
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
      Case c;
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
        Case c;
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
      Case c;
      c.head_dim = hd;
      c.group = 4;
      c.n_kv_heads = 1;
      c.window = window;
      c.n_rows = 130;
      c.first_slot = 5000;
      run_flash_case(c, seed++);
    }
  }
  Case odd;  // block size not a power of two, dense window across the whole prefill
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
      Case c;
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

// The Hopper (wgmma) path of flash_attention at head_dims 128 and 64 against
// CpuBackend::attention and against the FlashAttention-2 path (the switch
// set_flash_attention_hopper_enabled runs both in one process): full causal
// prefills of 1 to 1000 rows (around the 64-row warpgroup, 128-row (head dim
// 128) and 192-row (head dim 64) CTA and 128-key tile edges), chunks that start mid-sequence (also
// with keys after the chunk), sparse and unordered positions, sliding windows (ones that skip many
// leading tiles, rows that see no key), GQA groups 1, 4 and 7, block sizes 16 and 7. The GPU cache
// holds NaN in every slot the sequence does not own, outputs are poisoned (0xFF) and the padding
// between rows must stay untouched. Every case runs at both head dims. Timing lives in
// bench/flash_attention_bench.
#include "cuda/flash_attention_hopper.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/flash_attention.h"
#include "flash_attention_problem.h"

namespace specstack::cuda {
namespace {

using namespace flash_test;

// Hopper path vs the CPU twin per row (and overall), and vs the FA2 path.
void run_case_at(const Case& c, uint32_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "head_dim " << c.head_dim << " group " << c.group << " kv_heads " << c.n_kv_heads
               << " rows " << c.n_rows << " first_slot " << c.first_slot << " extra_keys "
               << c.extra_keys << " positions " << static_cast<int>(c.positions) << " window "
               << c.window << " block " << c.block_size << " seed " << seed);
  HopperSwitch restore;
  const Problem pb(c, seed);
  const std::vector<float> cpu = pb.cpu();
  int64_t padding_touched = 0;
  const std::vector<float> hopper = rows_of(pb, pb.gpu(true), &padding_touched);
  const std::vector<float> fa2 = rows_of(pb, pb.gpu(false), &padding_touched);
  EXPECT_EQ(padding_touched, 0) << "wrote outside [row, row + n_heads * head_dim)";
  int bad_rows = 0;
  for (int32_t r = 0; r < c.n_rows; ++r) {
    const std::vector<float> h(hopper.begin() + r * pb.row, hopper.begin() + (r + 1) * pb.row);
    const std::vector<float> ref(cpu.begin() + r * pb.row, cpu.begin() + (r + 1) * pb.row);
    const double err = relative_error(h, ref);
    if (!(err <= kBf16Tolerance) && ++bad_rows <= 8) {
      ADD_FAILURE() << "row " << r << " slot " << pb.q_slot[r] << " error " << err;
    }
  }
  EXPECT_EQ(bad_rows, 0);
  EXPECT_LE(relative_error(hopper, cpu), kBf16Tolerance);
  EXPECT_LE(relative_error(hopper, fa2), kBf16Tolerance);
}

// The case at head_dim 128 (the targets) and 64 (the drafts), fresh data each.
void run_case(Case c, uint32_t seed) {
  for (int32_t hd : {128, 64}) {
    c.head_dim = hd;
    run_case_at(c, seed + (hd == 64 ? 1000 : 0));
  }
}

TEST(CudaFlashAttentionHopper, SupportedAndSwitch) {
  SS_REQUIRE_HOPPER();
  HopperSwitch restore;
  DeviceBuffer<__nv_bfloat16> buf(64);
  FlashAttentionArgs a = shape_args(buf.data(), 128);
  EXPECT_TRUE(flash_attention_hopper_enabled());
  EXPECT_TRUE(flash_attention_hopper_supported(a))
      << "on Hopper the build must carry the sm_90a kernel (CMAKE_CUDA_ARCHITECTURES 90a)";
  set_flash_attention_hopper_enabled(false);
  EXPECT_FALSE(flash_attention_hopper_supported(a));
  set_flash_attention_hopper_enabled(true);
  a.head_dim = 64;
  EXPECT_TRUE(flash_attention_hopper_supported(a));
  a.head_dim = 96;  // no wgmma variant (and no FA2 one either)
  EXPECT_FALSE(flash_attention_hopper_supported(a));
  a.head_dim = 128;
  a.q_stride = 4100;  // rows not 16-byte aligned
  EXPECT_FALSE(flash_attention_hopper_supported(a));
}

TEST(CudaFlashAttentionHopper, FullCausalPrefill) {
  SS_REQUIRE_HOPPER();
  uint32_t seed = 1;
  for (int32_t group : {1, 4, 7}) {
    for (int32_t n : {1, 63, 64, 65, 127, 128, 129, 191, 192, 193, 200, 1000}) {
      Case c;
      c.group = group;
      c.n_kv_heads = group == 7 ? 1 : 2;
      c.n_rows = n;
      run_case(c, seed++);
    }
  }
}

TEST(CudaFlashAttentionHopper, ChunkMidSequence) {
  SS_REQUIRE_HOPPER();
  uint32_t seed = 100;
  for (int32_t group : {1, 4, 7}) {
    Case c;
    c.group = group;
    c.n_kv_heads = group == 1 ? 3 : 1;
    c.n_rows = 77;
    c.first_slot = 300;
    run_case(c, seed++);
    c.n_rows = 129;  // crosses a CTA edge
    c.first_slot = 333;
    c.extra_keys = 150;  // keys after the chunk exist and must stay invisible
    run_case(c, seed++);
    c.n_rows = 1;  // one row deep in the sequence: many unmasked tiles
    c.first_slot = 1500;
    c.extra_keys = 0;
    run_case(c, seed++);
  }
}

TEST(CudaFlashAttentionHopper, SparsePositionsAndSlidingWindow) {
  SS_REQUIRE_HOPPER();
  uint32_t seed = 200;
  for (int32_t group : {1, 4, 7}) {
    for (int32_t window : {0, 100}) {
      Case c;
      c.group = group;
      c.n_kv_heads = group == 7 ? 1 : 2;
      c.positions = Positions::kSparse;
      c.window = window;
      c.n_rows = 150;
      c.first_slot = 333;
      run_case(c, seed++);
      c.n_rows = 700;  // full prefill: the window cuts inside and across tiles
      c.first_slot = 0;
      run_case(c, seed++);
    }
  }
}

TEST(CudaFlashAttentionHopper, WindowSkipsLeadingTiles) {
  SS_REQUIRE_HOPPER();
  uint32_t seed = 300;
  for (int32_t window : {1, 64, 100, 1000}) {
    Case c;
    c.group = 4;
    c.n_kv_heads = 1;
    c.window = window;
    c.n_rows = 130;
    c.first_slot = 5000;
    run_case(c, seed++);
  }
  Case odd;  // block size not a power of two, dense window across the whole prefill
  odd.group = 2;
  odd.n_kv_heads = 2;
  odd.window = 64;
  odd.n_rows = 600;
  odd.block_size = 7;
  run_case(odd, seed++);
}

TEST(CudaFlashAttentionHopper, UnorderedPositionsAndBlindRows) {
  SS_REQUIRE_HOPPER();
  uint32_t seed = 400;
  for (int32_t window : {0, 300, 2500}) {
    Case c;
    c.group = 7;
    c.n_kv_heads = 1;
    c.positions = Positions::kShuffled;
    c.window = window;
    c.n_rows = 200;
    c.first_slot = 2900;
    run_case(c, seed++);
    c.positions = Positions::kSparse;
    c.blind_rows = true;
    run_case(c, seed++);
  }
}

}  // namespace
}  // namespace specstack::cuda

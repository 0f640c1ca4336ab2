// The int8 GEMM tiles for prefill (backend/cpu/quant_gemm.h) against the
// one-row kernels of the same isa: equal bit for bit per (weight row,
// activation row), directly (the tile function, rows and activation rows
// two strides apart) and through matmul_quant_tiled (ragged edges in both
// directions, threads, bias). AVX2 runs here; the AVX-512 VNNI cases skip
// without AVX-512 F/BW/VL/VNNI (the development VM) and run on the device
// machine's Xeon.
#include "backend/cpu/quant_gemm.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::activations;
using specstack::testing::float_bits;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

class QuantGemmTest : public ::testing::TestWithParam<std::tuple<Isa, DType>> {
 protected:
  Isa isa() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    if (!quant_isa_available(isa()))
      GTEST_SKIP() << "this CPU lacks " << isa_name(isa())
                   << " (AVX-512 F/BW/VL/VNNI with OS zmm state, or AVX2 + FMA + F16C): its int8 "
                      "tiles are not testable here (the VNNI ones run on the device machine)";
  }
};

// The tile on weight rows 0, 2, 4, ... and activation rows 0, 2, 4, ...
// (strides of two rows: a kernel that assumed adjacent rows fails) equals
// dot for every pair, for 1 .. 97 blocks (odd counts: the one-block tail;
// 31 .. 97: the tiles' 32-block chunks, a short last chunk, even and odd).
TEST_P(QuantGemmTest, TileEqualsOneRowBitForBit) {
  const Isa isa = this->isa();
  const DType dtype = this->dtype();
  const QuantTile tile = quant_tile(dtype, isa);
  ASSERT_NE(tile.fn, nullptr) << isa_name(isa) << " " << dtype_name(dtype);
  const QuantKernel k = quant_kernel(dtype, isa);
  std::mt19937 rng(900 + 7 * static_cast<int>(isa) + static_cast<int>(dtype));
  for (int64_t n_blocks : {1, 2, 3, 4, 5, 8, 11, 17, 31, 32, 33, 64, 65, 97}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t in = n_blocks * 32;
      Tensor w = random_quantized(rng, dtype, 2 * tile.rows, in);
      Tensor x = activations(rng, 2 * tile.cols, in);
      const std::unique_ptr<uint8_t[]> act = [&] {
        ThreadPool pool(1);
        return quantize_activation_rows(pool, k, x);
      }();
      const int64_t w_bytes = int64_t(dtype_bytes(dtype, in));
      const int64_t a_bytes = n_blocks * int64_t(k.act_block_bytes);
      const auto* wb = static_cast<const uint8_t*>(w.raw());
      const int64_t out_stride = tile.rows + 3;
      std::vector<float> out(size_t(tile.cols * out_stride), -1.0f);
      tile.fn(wb, 2 * w_bytes, act.get(), 2 * a_bytes, n_blocks, out.data(), out_stride);
      for (int c = 0; c < tile.cols; ++c) {
        for (int r = 0; r < tile.rows; ++r) {
          const float one = k.dot(wb + 2 * r * w_bytes, act.get() + 2 * c * a_bytes, n_blocks);
          ASSERT_EQ(float_bits(out[size_t(c * out_stride + r)]), float_bits(one))
              << isa_name(isa) << " " << dtype_name(dtype) << " n_blocks=" << n_blocks
              << " trial=" << trial << " r=" << r << " c=" << c;
        }
        for (int r = tile.rows; r < out_stride; ++r)
          ASSERT_EQ(out[size_t(c * out_stride + r)], -1.0f) << "wrote past the tile";
      }
    }
  }
}

// The packed tiles (AVX-512 VNNI: QuantTile::pack_w / pack_a / fn_packed)
// at every shape matmul_quant_tiled uses, the full tile and each ragged
// edge (1 .. rows x 1 .. cols), on packed rows taken from every other row
// of the originals, equal dot for every pair, for odd block counts (the
// zero-partner pair) and even ones; and nothing is written past the edge.
TEST_P(QuantGemmTest, PackedTileEdgesEqualOneRowBitForBit) {
  const Isa isa = this->isa();
  const DType dtype = this->dtype();
  const QuantTile tile = quant_tile(dtype, isa);
  if (tile.fn_packed == nullptr)
    GTEST_SKIP() << isa_name(isa) << " has no packed tile (its tiles read the blocks as stored)";
  ASSERT_NE(tile.pack_w, nullptr);
  ASSERT_NE(tile.pack_a, nullptr);
  const QuantKernel k = quant_kernel(dtype, isa);
  std::mt19937 rng(970 + 7 * static_cast<int>(isa) + static_cast<int>(dtype));
  for (int64_t n_blocks : {1, 2, 3, 6, 7, 64, 65}) {
    const int64_t in = n_blocks * 32, n_pairs = (n_blocks + 1) / 2;
    Tensor w = random_quantized(rng, dtype, 2 * tile.rows, in);
    Tensor x = activations(rng, 2 * tile.cols, in);
    const std::unique_ptr<uint8_t[]> act = [&] {
      ThreadPool pool(1);
      return quantize_activation_rows(pool, k, x);
    }();
    const int64_t w_bytes = int64_t(dtype_bytes(dtype, in));
    const int64_t a_bytes = n_blocks * int64_t(k.act_block_bytes);
    const auto* wb = static_cast<const uint8_t*>(w.raw());
    std::vector<uint8_t> pw(size_t(tile.rows * n_pairs * tile.w_pair_bytes));
    std::vector<uint8_t> pa(size_t(tile.cols * n_pairs * tile.a_pair_bytes));
    std::vector<float> pws(size_t(tile.rows * 2 * n_pairs)), pas(size_t(tile.cols * 2 * n_pairs));
    tile.pack_w(wb, 2 * w_bytes, tile.rows, n_blocks, pw.data(), pws.data());
    tile.pack_a(act.get(), 2 * a_bytes, tile.cols, n_blocks, pa.data(), pas.data());
    for (int rows = 1; rows <= tile.rows; ++rows) {
      for (int cols = 1; cols <= tile.cols; ++cols) {
        const int64_t out_stride = tile.rows + 2;
        std::vector<float> out(size_t(tile.cols * out_stride), -1.0f);
        tile.fn_packed(pw.data(), pws.data(), pa.data(), pas.data(), n_pairs, rows, cols,
                       out.data(), out_stride);
        for (int c = 0; c < tile.cols; ++c) {
          for (int r = 0; r < out_stride; ++r) {
            const float got = out[size_t(c * out_stride + r)];
            if (c >= cols || r >= rows) {
              ASSERT_EQ(got, -1.0f) << "wrote past the " << rows << " x " << cols << " edge";
              continue;
            }
            const float one = k.dot(wb + 2 * r * w_bytes, act.get() + 2 * c * a_bytes, n_blocks);
            ASSERT_EQ(float_bits(got), float_bits(one))
                << isa_name(isa) << " " << dtype_name(dtype) << " n_blocks=" << n_blocks << " tile "
                << rows << " x " << cols << " r=" << r << " c=" << c;
          }
        }
      }
    }
  }
}

// matmul_quant_tiled equals matmul_quant (the one- and four-row kernels,
// themselves equal to dot: quant_matmul_test) bit for bit, bias included,
// for weight row counts around the register and cache tiles and activation
// row counts around the tile width.
TEST_P(QuantGemmTest, MatmulTiledEqualsMatmulQuantBitForBit) {
  const Isa isa = this->isa();
  const DType dtype = this->dtype();
  const QuantTile tile = quant_tile(dtype, isa);
  ThreadPool pool(3);
  std::mt19937 rng(950 + 7 * static_cast<int>(isa) + static_cast<int>(dtype));
  // 41, 83: the packed path's 40-row cache tiles and a ragged last one.
  for (int64_t out : {1, 3, 4, 5, 7, 31, 33, 41, 70, 83}) {
    for (int64_t n : {int64_t{1}, int64_t{tile.cols - 1}, int64_t{tile.cols}, int64_t{5},
                      int64_t{17}, int64_t{40}}) {
      if (n < 1) continue;
      const int64_t in = (out == 41 ? 1 : out % 2 ? 3 : 6) * 32;
      Tensor w = random_quantized(rng, dtype, out, in);
      Tensor x = activations(rng, n, in);
      Tensor bias = random_f32(rng, {out});
      Tensor y = Tensor::zeros(DType::kF32, {n, out}), ref = Tensor::zeros(DType::kF32, {n, out});
      matmul_quant_tiled(pool, x, w, &bias, y, isa);
      matmul_quant(pool, x, w, &bias, ref, isa);
      for (int64_t i = 0; i < n * out; ++i) {
        ASSERT_EQ(float_bits(y.f32()[i]), float_bits(ref.f32()[i]))
            << isa_name(isa) << " " << dtype_name(dtype) << " out=" << out << " n=" << n << " at "
            << i / out << "," << i % out;
      }
    }
  }
}

// Long rows, many activation rows: the packed path splits the activation
// rows into chunks of ~1 MB packed (here 16384-wide rows: 30 rows a chunk,
// so 70 rows are 30 + 30 + 10, the last chunk ragged in the tile's columns)
// and packs the weights again per chunk; the outputs stay bit-equal.
TEST_P(QuantGemmTest, MatmulTiledAcrossActivationChunksBitForBit) {
  const Isa isa = this->isa();
  const DType dtype = this->dtype();
  ThreadPool pool(2);
  std::mt19937 rng(990 + 7 * static_cast<int>(isa) + static_cast<int>(dtype));
  const int64_t out = 13, n = 70, in = 16384;
  Tensor w = random_quantized(rng, dtype, out, in);
  Tensor x = activations(rng, n, in);
  Tensor bias = random_f32(rng, {out});
  Tensor y = Tensor::zeros(DType::kF32, {n, out}), ref = Tensor::zeros(DType::kF32, {n, out});
  matmul_quant_tiled(pool, x, w, &bias, y, isa);
  matmul_quant(pool, x, w, &bias, ref, isa);
  for (int64_t i = 0; i < n * out; ++i) {
    ASSERT_EQ(float_bits(y.f32()[i]), float_bits(ref.f32()[i]))
        << isa_name(isa) << " " << dtype_name(dtype) << " at " << i / out << "," << i % out;
  }
}

INSTANTIATE_TEST_SUITE_P(
    IsasTypes, QuantGemmTest,
    ::testing::Combine(::testing::Values(Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni),
                       ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ5_0)),
    [](const auto& info) {
      return std::string(isa_name(std::get<0>(info.param))) + "_" +
             dtype_name(std::get<1>(info.param));
    });

// Only the 32-blocks (Q8_0, Q4_0, Q5_0) on AVX2 / AVX-512 VNNI have tiles so
// far; the K-quants (and the scalar isa) prefill through dequantize + sgemm.
TEST(QuantGemm, TilesOnlyForThe32BlocksOnSimd) {
  EXPECT_EQ(quant_tile(DType::kQ8_0, Isa::kScalar).fn, nullptr);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!quant_isa_available(isa)) continue;
    for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0})
      EXPECT_NE(quant_tile(d, isa).fn, nullptr) << dtype_name(d) << " " << isa_name(isa);
    for (DType d : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      EXPECT_EQ(quant_tile(d, isa).fn, nullptr) << dtype_name(d) << " " << isa_name(isa);
      EXPECT_EQ(quant_tile(d, isa).rows, 0) << dtype_name(d) << " " << isa_name(isa);
    }
  }
}

TEST(QuantGemm, PrefillPathFollowsTheVariable) {
  std::string note;
  EXPECT_EQ(choose_quant_prefill(nullptr, &note), QuantPrefill::kAuto);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_prefill("", &note), QuantPrefill::kAuto);
  EXPECT_EQ(choose_quant_prefill("sgemm", &note), QuantPrefill::kSgemm);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_prefill("int8", &note), QuantPrefill::kInt8);
  EXPECT_EQ(choose_quant_prefill("blocksum", &note), QuantPrefill::kBlockSum);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(choose_quant_prefill("fast", &note), QuantPrefill::kAuto);
  EXPECT_NE(note.find("SPECSTACK_QUANT_PREFILL=fast ignored"), std::string::npos) << note;
}

// kAuto: the block-sum GEMM for Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K on AVX-512
// VNNI and AVX-VNNI at every count (not Q6_K), else
// the tiles up to the isa's row limit (AVX2 32, AVX-512 VNNI 256),
// dequantize + sgemm beyond and for types without tiles; the pinned paths
// hold at every count, kBlockSum falling back to kAuto's choice for the
// types it lacks.
TEST(QuantGemm, PrefillPathByRowCount) {
  EXPECT_EQ(quant_tiled_max_rows(Isa::kAvx2), 32);
  EXPECT_EQ(quant_tiled_max_rows(Isa::kAvxVnni), 32);
  EXPECT_EQ(quant_tiled_max_rows(Isa::kScalar), 0);
  EXPECT_EQ(quant_tiled_max_rows(Isa::kAvx512Vnni), 256);
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512Vnni}) {
    if (!quant_isa_available(isa)) continue;
    const int64_t limit = quant_tiled_max_rows(isa);
    const bool blocksum = isa != Isa::kAvx2;  // either VNNI
    for (int64_t n : {int64_t{17}, limit, limit + 1, int64_t{4096}}) {
      EXPECT_EQ(quant_prefill_uses_blocksum(QuantPrefill::kAuto, DType::kQ8_0, isa, n), blocksum);
      EXPECT_EQ(quant_prefill_uses_blocksum(QuantPrefill::kBlockSum, DType::kQ8_0, isa, n),
                blocksum);
      EXPECT_FALSE(quant_prefill_uses_blocksum(QuantPrefill::kInt8, DType::kQ8_0, isa, n));
      EXPECT_FALSE(quant_prefill_uses_blocksum(QuantPrefill::kSgemm, DType::kQ8_0, isa, n));
      EXPECT_EQ(quant_prefill_uses_blocksum(QuantPrefill::kAuto, DType::kQ4_0, isa, n), blocksum);
      EXPECT_EQ(quant_prefill_uses_blocksum(QuantPrefill::kAuto, DType::kQ4_K, isa, n), blocksum);
      EXPECT_FALSE(quant_prefill_uses_blocksum(QuantPrefill::kAuto, DType::kQ6_K, isa, n));
      EXPECT_EQ(quant_prefill_uses_tiles(QuantPrefill::kAuto, DType::kQ8_0, isa, n),
                !blocksum && n <= limit);
    }
    for (QuantPrefill p : {QuantPrefill::kAuto, QuantPrefill::kBlockSum}) {
      EXPECT_EQ(quant_prefill_uses_tiles(p, DType::kQ4_0, isa, limit), !blocksum);
      EXPECT_FALSE(quant_prefill_uses_tiles(p, DType::kQ4_0, isa, limit + 1));
    }
    EXPECT_TRUE(quant_prefill_uses_tiles(QuantPrefill::kInt8, DType::kQ8_0, isa, 4096));
    EXPECT_FALSE(quant_prefill_uses_tiles(QuantPrefill::kSgemm, DType::kQ8_0, isa, 17));
    EXPECT_FALSE(quant_prefill_uses_tiles(QuantPrefill::kInt8, DType::kQ4_K, isa, 17));
  }
}

}  // namespace
}  // namespace specstack::cpu

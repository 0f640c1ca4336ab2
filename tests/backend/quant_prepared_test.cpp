// Prepared activations (QuantKernel::prepared, quant_kernels.h): the Q4_0
// kernels on AVX2 / AVX-512 VNNI that read the activation row in their own
// layout (quant_blocks.h Q4_0Act) against the kernels on the quantized
// blocks, bit for bit, directly and through matmul_quant; the layout itself
// against its definition. AVX2 runs here; the AVX-512 VNNI cases run on CPUs
// that have it (the device machine) and are left out elsewhere.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::float_bits;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

std::vector<Isa> simd_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512Vnni})
    if (quant_isa_available(isa)) isas.push_back(isa);
  return isas;
}

// Which kernels have a prepared form: Q4_0 on the SIMD isas, nothing else
// (the matmul takes the blocks path for them).
TEST(QuantPrepared, Q4_0OnTheSimdIsasOnly) {
  for (DType dtype :
       {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_EQ(quant_kernel(dtype, Isa::kScalar).prepared.prepare, nullptr) << dtype_name(dtype);
    for (Isa isa : simd_isas()) {
      const QuantPrepared p = quant_kernel(dtype, isa).prepared;
      if (dtype == DType::kQ4_0) {
        EXPECT_EQ(p.bytes_per_block, quant::kQ4_0ActBytesPerBlock) << isa_name(isa);
        EXPECT_NE(p.prepare, nullptr);
        EXPECT_NE(p.dot, nullptr);
        EXPECT_NE(p.dot4, nullptr);
      } else {
        EXPECT_EQ(p.prepare, nullptr) << dtype_name(dtype) << " " << isa_name(isa);
      }
    }
  }
}

// The prepared row of 5 blocks (two pairs and an odd last block) holds what
// quant_blocks.h says: values pair-interleaved in 16-value halves, -8 x each
// 4 values' sum, the scales as f32.
TEST(QuantPrepared, Q4_0LayoutIsAsDocumented) {
  if (simd_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  const QuantKernel k = quant_kernel(DType::kQ4_0, Isa::kAvx2);
  constexpr int64_t n = 5;
  std::mt19937 rng(31);
  Tensor x = random_f32(rng, {n * 32}, -3.0f, 3.0f);
  std::vector<quant::BlockQ8_0> blocks(n);
  quantize_activations(QuantAct::kQ8_0, x.f32(), n * 32, blocks.data());
  std::vector<uint8_t> prep(size_t(n * k.prepared.bytes_per_block));
  k.prepared.prepare(blocks.data(), n, prep.data());
  const quant::Q4_0ActView a = quant::q4_0_act_view(prep.data(), n);
  for (int64_t b = 0; b < n; ++b) {
    EXPECT_EQ(float_bits(a.d[b]), float_bits(f16_to_f32(blocks[size_t(b)].d))) << b;
    for (int j = 0; j < 32; ++j) {
      // Where value j of block b sits in qs.
      int64_t pos = 32 * b + j;  // the odd last block: as it is
      if (b + 1 < n || b % 2 == 1) {
        const int64_t pair = b / 2 * 64, second = b % 2;
        pos = pair + (j < 16 ? 0 : 32) + 16 * second + j % 16;
      }
      ASSERT_EQ(a.qs[pos], blocks[size_t(b)].qs[j]) << "block " << b << " value " << j;
    }
  }
  for (int64_t lane = 0; lane < 8 * n; ++lane) {
    int sum = 0;
    for (int t = 0; t < 4; ++t) sum += a.qs[4 * lane + t];
    ASSERT_EQ(a.off[lane], -8 * sum) << lane;
  }
}

// Weight rows of 1-17 and 64-65 blocks; random bytes (every nibble) and the
// extremes (all nibbles 0, all 15) against activations with outliers and
// saturated blocks (+-127): prepared dot and dot4 equal the block kernels'
// dot bit for bit. The prepared row sits 4 bytes past a 64-byte boundary:
// the kernels must not assume vector alignment (matmul_quant aligns it only
// for speed).
TEST(QuantPrepared, Q4_0DotEqualsBlocksKernelBitForBit) {
  if (simd_isas().empty()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (Isa isa : simd_isas()) {
    const QuantKernel k = quant_kernel(DType::kQ4_0, isa);
    std::mt19937 rng(77 + static_cast<int>(isa));
    for (int64_t n_blocks : {1, 2, 3, 4, 5, 8, 11, 17, 64, 65}) {
      for (int trial = 0; trial < 6; ++trial) {
        const int64_t in = n_blocks * 32;
        Tensor w = random_quantized(rng, DType::kQ4_0, 8, in);
        auto* wb = static_cast<uint8_t*>(w.raw());
        if (trial >= 4) {  // every nibble 0 (trial 4) or 15 (trial 5), scales kept
          const uint8_t fill = trial == 4 ? 0x00 : 0xFF;
          for (size_t blk = 0; blk < w.nbytes() / sizeof(quant::BlockQ4_0); ++blk)
            std::memset(wb + blk * sizeof(quant::BlockQ4_0) + 2, fill, 16);
        }
        Tensor x = random_f32(rng, {in}, -2.0f, 2.0f);
        for (int64_t i = trial % 7; i < in; i += 29) x.f32()[i] *= 30.0f;
        if (trial % 2 == 1) {  // saturated blocks: every value +-max
          for (int64_t i = 0; i < in; ++i) x.f32()[i] = (i / 32 + i) % 3 == 0 ? -1.0f : 1.0f;
        }
        std::vector<uint8_t> act(size_t(n_blocks) * k.act_block_bytes);
        quantize_activations(k.act, x.f32(), in, act.data());
        std::vector<uint8_t> prep_buf(size_t(n_blocks * k.prepared.bytes_per_block) + 128);
        const auto addr = reinterpret_cast<uintptr_t>(prep_buf.data());
        uint8_t* prep = prep_buf.data() + (64 - addr % 64) + 4;
        k.prepared.prepare(act.data(), n_blocks, prep);
        const int64_t row_bytes = int64_t(dtype_bytes(DType::kQ4_0, in));
        float four[4];
        k.prepared.dot4(wb, 2 * row_bytes, prep, n_blocks, four);
        for (int r = 0; r < 8; ++r) {
          const float ref = k.dot(wb + r * row_bytes, act.data(), n_blocks);
          const float got = k.prepared.dot(wb + r * row_bytes, prep, n_blocks);
          ASSERT_EQ(float_bits(got), float_bits(ref))
              << isa_name(isa) << " n_blocks=" << n_blocks << " trial=" << trial << " row " << r
              << ": prepared " << got << " blocks " << ref;
          if (r % 2 == 0) {
            ASSERT_EQ(float_bits(four[r / 2]), float_bits(ref))
                << isa_name(isa) << " dot4, n_blocks=" << n_blocks << " trial=" << trial << " row "
                << r;
          }
        }
      }
    }
  }
}

// Through matmul_quant (threads, 16-row tiles, four-row passes and one-row
// tails, bias, 1-16 activation rows): the prepared path equals the blocks
// path on every output, for every type (most have no prepared form and run
// the same code both ways).
TEST(QuantPrepared, MatmulPreparedEqualsBlocksBitForBit) {
  ThreadPool pool(3);
  std::mt19937 rng(5);
  for (DType dtype :
       {DType::kQ4_0, DType::kQ8_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const int64_t blk = dtype_block_elements(dtype);
    for (Isa isa : simd_isas()) {
      for (auto [n, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 7 * blk, 37},
                                {3, 2 * blk, 9},
                                {16, 5 * blk, 50}}) {
        Tensor w = random_quantized(rng, dtype, out, in);
        Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
        Tensor bias = random_f32(rng, {out});
        for (int rows_per_pass : {1, 4}) {
          Tensor yp = Tensor::zeros(DType::kF32, {n, out});
          Tensor yb = Tensor::zeros(DType::kF32, {n, out});
          matmul_quant(pool, x, w, &bias, yp, isa, rows_per_pass, QuantActForm::kPrepared);
          matmul_quant(pool, x, w, &bias, yb, isa, rows_per_pass, QuantActForm::kBlocks);
          for (int64_t i = 0; i < n * out; ++i) {
            ASSERT_EQ(float_bits(yp.f32()[i]), float_bits(yb.f32()[i]))
                << dtype_name(dtype) << " " << isa_name(isa) << " n=" << n << " x" << rows_per_pass
                << " at " << i;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace specstack::cpu

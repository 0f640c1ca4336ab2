// The block-sum int8 GEMM (backend/cpu/quant_blocksum.h): every output
// equals the scalar reference blocksum_dot_ref on the same Q8_0 activation
// blocks bit for bit, and stays within the f32 rounding of the one-row
// decode kernel (the same integers per block, summed in another order).
// Q4_K / Q5_K weights (unpacked to the same kernel, their mins taken off at
// the end) equal the dequantized weights times the activation blocks up to
// f32 rounding.
#include "backend/cpu/quant_blocksum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "gguf/gguf_dequant.h"
#include "gguf/gguf_types.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::act_blocks;
using specstack::testing::activations;
using specstack::testing::float_bits;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

// The kernels run on AVX-512 VNNI (zmm tiles) and AVX-VNNI (ymm tiles):
// each test runs on both where the CPU has them (the device Xeon and the
// dev VM have both).
class QuantBlocksumTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!quant_isa_available(GetParam())) GTEST_SKIP() << "this CPU lacks " << isa_name(GetParam());
  }
};

// w [out, in] (Q4_K or Q5_K) by gguf's reference dequantizer into out [out * in].
bool dequantize_weights(DType dtype, const Tensor& w, float* out) {
  const gguf::GgmlType type = dtype == DType::kQ4_K ? gguf::GgmlType::kQ4_K : gguf::GgmlType::kQ5_K;
  return gguf::dequantize(static_cast<uint32_t>(type), static_cast<const uint8_t*>(w.raw()),
                          w.size(0) * w.size(1), out)
      .ok();
}

TEST(QuantBlocksum, Q8_0AndFourAndFiveBitTypesOnVnni) {
  for (Isa isa : {Isa::kAvx512Vnni, Isa::kAvxVnni}) {
    EXPECT_FALSE(quant_blocksum_available(DType::kQ6_K, isa));
    EXPECT_FALSE(quant_blocksum_available(DType::kBF16, isa));
    for (DType dtype :
         {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ5_K, DType::kQ8_0P}) {
      EXPECT_EQ(quant_blocksum_available(dtype, isa), quant_isa_available(isa))
          << dtype_name(dtype) << " " << isa_name(isa);
    }
  }
  // AVX2's maddubs would saturate the (a + 128) w pairs: no block-sum GEMM.
  EXPECT_FALSE(quant_blocksum_available(DType::kQ8_0, Isa::kAvx2));
  EXPECT_FALSE(quant_blocksum_available(DType::kQ4_K, Isa::kAvx2));
  EXPECT_FALSE(quant_blocksum_available(DType::kQ8_0, Isa::kScalar));
}

// K-quant weights: the dequantized weights (gguf's reference dequantizer)
// times the Q8_0 activation blocks' values, in double, against the kernel's
// f32 result: within a few ulps of the sum of |terms| (scale * q and min
// summed separately, so both parts' magnitudes count). Shapes cross the
// register tile, the cache tile and the chunks; bias included.
TEST_P(QuantBlocksumTest, KQuantsEqualTheDequantizedProduct) {
  const Isa isa = GetParam();
  ThreadPool pool(3);
  std::mt19937 rng(515);
  for (DType dtype : {DType::kQ4_K, DType::kQ5_K}) {
    for (int64_t out : {1, 5, 33, 70}) {
      for (int64_t n : {1, 16, 17, 50}) {
        for (int64_t supers : {1, 3}) {
          const int64_t in = supers * 256, blocks = in / 32;
          Tensor w = random_quantized(rng, dtype, out, in);
          Tensor x = activations(rng, n, in);
          Tensor bias = random_f32(rng, {out});
          Tensor y = Tensor::zeros(DType::kF32, {n, out});
          matmul_quant_blocksum(pool, x, w, &bias, y, isa);
          std::vector<float> wf(size_t(out * in));
          ASSERT_TRUE(dequantize_weights(dtype, w, wf.data()));
          const std::vector<quant::BlockQ8_0> a = act_blocks(x);
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t o = 0; o < out; ++o) {
              double ref = bias.f32()[o], mag = std::fabs(bias.f32()[o]);
              for (int64_t j = 0; j < in; ++j) {
                const quant::BlockQ8_0& ab = a[size_t(i * blocks + j / 32)];
                const double av = double(f16_to_f32(ab.d)) * ab.qs[j % 32];
                ref += double(wf[size_t(o * in + j)]) * av;
                mag += std::fabs(double(wf[size_t(o * in + j)]) * av) * 4.0;
              }
              ASSERT_NEAR(y.f32()[i * out + o], ref, 4e-6 * mag + 1e-6)
                  << dtype_name(dtype) << " out=" << out << " n=" << n << " in=" << in << " at "
                  << i << "," << o;
            }
          }
        }
      }
    }
  }
}

// Shapes around the register tiles (AVX-512 VNNI: 4 weight rows x 2 groups
// of 16 activation rows; AVX-VNNI: 3 rows x 1 group), the 32-row cache tile and the 16-block
// chunks, with ragged ends of each; bias included.
TEST_P(QuantBlocksumTest, MatmulEqualsScalarReferenceBitForBit) {
  const Isa isa = GetParam();
  ThreadPool pool(3);
  std::mt19937 rng(4242);
  for (int64_t out : {1, 3, 4, 5, 33, 70}) {
    for (int64_t n : {1, 15, 16, 17, 32, 33, 50}) {
      for (int64_t blocks : {1, 15, 16, 17, 40}) {
        const int64_t in = blocks * 32;
        Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
        Tensor x = activations(rng, n, in);
        Tensor bias = random_f32(rng, {out});
        Tensor y = Tensor::zeros(DType::kF32, {n, out});
        matmul_quant_blocksum(pool, x, w, &bias, y, isa);
        const std::vector<quant::BlockQ8_0> a = act_blocks(x);
        const auto* wb = static_cast<const quant::BlockQ8_0*>(w.raw());
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t o = 0; o < out; ++o) {
            const float ref =
                blocksum_dot_ref(wb + o * blocks, a.data() + i * blocks, blocks) + bias.f32()[o];
            ASSERT_EQ(float_bits(y.f32()[i * out + o]), float_bits(ref))
                << "out=" << out << " n=" << n << " blocks=" << blocks << " at " << i << "," << o;
          }
        }
      }
    }
  }
}

// Q4_0 / Q5_0 weights: their blocks are Q8_0 blocks (q - 8 / q - 16 with
// the same f16 scale), so the result equals blocksum_dot_ref over those
// blocks bit for bit; the blocks are rebuilt here from gguf's reference
// dequantizer (value / d is the exact small integer).
TEST_P(QuantBlocksumTest, Q4_0AndQ5_0EqualTheScalarReferenceOfTheirBlocks) {
  const Isa isa = GetParam();
  ThreadPool pool(3);
  std::mt19937 rng(616);
  for (DType dtype : {DType::kQ4_0, DType::kQ5_0}) {
    const int64_t out = 37, n = 21, blocks = 19, in = blocks * 32;
    Tensor w = random_quantized(rng, dtype, out, in);
    Tensor x = activations(rng, n, in);
    Tensor y = Tensor::zeros(DType::kF32, {n, out});
    matmul_quant_blocksum(pool, x, w, nullptr, y, isa);
    std::vector<float> wf(size_t(out * in));
    const gguf::GgmlType type =
        dtype == DType::kQ4_0 ? gguf::GgmlType::kQ4_0 : gguf::GgmlType::kQ5_0;
    ASSERT_TRUE(gguf::dequantize(static_cast<uint32_t>(type), static_cast<const uint8_t*>(w.raw()),
                                 out * in, wf.data())
                    .ok());
    const size_t block_bytes = dtype_block_bytes(dtype);
    std::vector<quant::BlockQ8_0> wb(size_t(out * blocks));
    for (int64_t b = 0; b < out * blocks; ++b) {
      std::memcpy(&wb[size_t(b)].d, static_cast<const uint8_t*>(w.raw()) + b * block_bytes, 2);
      const float d = f16_to_f32(wb[size_t(b)].d);
      for (int j = 0; j < 32; ++j)
        wb[size_t(b)].qs[j] = static_cast<int8_t>(std::lround(wf[size_t(b * 32 + j)] / d));
    }
    const std::vector<quant::BlockQ8_0> a = act_blocks(x);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t o = 0; o < out; ++o) {
        ASSERT_EQ(
            float_bits(y.f32()[i * out + o]),
            float_bits(blocksum_dot_ref(wb.data() + o * blocks, a.data() + i * blocks, blocks)))
            << dtype_name(dtype) << " at " << i << "," << o;
      }
    }
  }
}

// Weight bytes of -128 and saturated activations: the +128 / -128 Σw
// offsets stay exact at the extremes of the int8 range.
TEST_P(QuantBlocksumTest, ExtremeBytesStayExact) {
  const Isa isa = GetParam();
  ThreadPool pool(2);
  std::mt19937 rng(77);
  const int64_t out = 9, n = 20, blocks = 5, in = blocks * 32;
  Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
  auto* wb = static_cast<quant::BlockQ8_0*>(w.raw());
  for (int j = 0; j < 32; ++j)
    wb[0].qs[j] = -128, wb[1].qs[j] = 127, wb[2].qs[j] = j % 2 ? -128 : 127;
  Tensor x = activations(rng, n, in);
  for (int64_t i = 0; i < in; ++i) x.f32()[i] = (i / 32) % 2 ? 1.0f : -1.0f;  // a = +-127
  Tensor y = Tensor::zeros(DType::kF32, {n, out});
  matmul_quant_blocksum(pool, x, w, nullptr, y, isa);
  const std::vector<quant::BlockQ8_0> a = act_blocks(x);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o)
      ASSERT_EQ(float_bits(y.f32()[i * out + o]),
                float_bits(blocksum_dot_ref(wb + o * blocks, a.data() + i * blocks, blocks)))
          << i << "," << o;
}

// Against the decode path (matmul_quant: the same integer per 4 values,
// scaled per lane and summed across lanes at the end): the same quantity
// up to f32 rounding, so within a few ulps of Σ |d_w d_a Σ w a| per block.
TEST_P(QuantBlocksumTest, CloseToTheDecodeKernels) {
  const Isa isa = GetParam();
  ThreadPool pool(2);
  std::mt19937 rng(99);
  const int64_t out = 37, n = 40, blocks = 64, in = blocks * 32;
  Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
  Tensor x = activations(rng, n, in);
  Tensor y = Tensor::zeros(DType::kF32, {n, out}), ref = Tensor::zeros(DType::kF32, {n, out});
  matmul_quant_blocksum(pool, x, w, nullptr, y, isa);
  matmul_quant(pool, x, w, nullptr, ref, isa);
  const std::vector<quant::BlockQ8_0> a = act_blocks(x);
  const auto* wb = static_cast<const quant::BlockQ8_0*>(w.raw());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double mag = 0.0;  // Σ over blocks and values of |d_w w d_a a|
      for (int64_t b = 0; b < blocks; ++b) {
        const auto& wk = wb[o * blocks + b];
        const auto& ak = a[size_t(i * blocks + b)];
        for (int j = 0; j < 32; ++j)
          mag += std::fabs(double(f16_to_f32(wk.d)) * wk.qs[j] * f16_to_f32(ak.d) * ak.qs[j]);
      }
      EXPECT_NEAR(y.f32()[i * out + o], ref.f32()[i * out + o], 1e-6 * mag) << i << "," << o;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantBlocksumTest,
                         ::testing::Values(Isa::kAvx512Vnni, Isa::kAvxVnni),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
}  // namespace specstack::cpu

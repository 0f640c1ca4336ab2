// Q8_0 panels (backend/cpu/quant_panels.h): the layout round-trips and is
// as documented, and every output of the panel matmul, on the scalar loop
// and on AVX-512 VNNI, equals blocksum_dot_ref of the row's Q8_0 blocks and
// the activation row's blocks (+ bias) bit for bit, for 1-17 activation rows
// (ragged passes of 4), through matmul()'s dispatch too, and equals what the
// block-sum prefill GEMM computes from the Q8_0 rows.
#include "backend/cpu/quant_panels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_matmul.h"
#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_blocksum.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "cpu_test_helpers.h"
#include "quant_rows_check.h"
#include "quant_test_helpers.h"

namespace specstack::cpu {
namespace {

using specstack::testing::act_blocks;
using specstack::testing::activations;
using specstack::testing::float_bits;
using specstack::testing::random_f32;
using specstack::testing::random_quantized;

// y[i, o] against blocksum_dot_ref on the Q8_0 rows of `rows` (+ bias or +0).
void expect_reference(const Tensor& y, const Tensor& rows, const Tensor& x, const Tensor* bias,
                      const char* what) {
  const int64_t n = x.size(0), out = rows.size(0), n_blocks = x.size(1) / 32;
  const std::vector<quant::BlockQ8_0> a = act_blocks(x);
  const auto* w = static_cast<const quant::BlockQ8_0*>(rows.raw());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const float ref = blocksum_dot_ref(w + o * n_blocks, a.data() + i * n_blocks, n_blocks) +
                        (bias ? bias->f32()[o] : 0.0f);
      ASSERT_EQ(float_bits(y.f32()[i * out + o]), float_bits(ref))
          << what << " out=" << out << " n=" << n << " in=" << x.size(1) << " at " << i << "," << o
          << ": " << y.f32()[i * out + o] << " vs " << ref;
    }
  }
}

TEST(QuantPanels, RoundTripAndDocumentedLayout) {
  ThreadPool pool(3);
  std::mt19937 rng(16);
  const int64_t out = 48, in = 96, n_blocks = 3;
  Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
  ASSERT_TRUE(q8_0_panels_fit(w));
  Tensor p = repack_q8_0_panels(pool, w);
  EXPECT_EQ(p.dtype(), DType::kQ8_0P);
  EXPECT_EQ(p.nbytes(), w.nbytes());
  std::vector<uint8_t> back(w.nbytes());
  panel_rows_to_q8_0(p, 0, out, back.data());
  EXPECT_EQ(std::memcmp(back.data(), w.raw(), w.nbytes()), 0);
  // A middle range starting inside a panel.
  std::vector<uint8_t> part(size_t(21 * n_blocks * 34));
  panel_rows_to_q8_0(p, 13, 34, part.data());
  EXPECT_EQ(std::memcmp(part.data(), static_cast<const uint8_t*>(w.raw()) + 13 * n_blocks * 34,
                        part.size()),
            0);
  // Row 37 = panel 2, lane 5; block 1; value 4k + e at 32 + 64k + 4 * 5 + e, + 128.
  const auto* rows = static_cast<const quant::BlockQ8_0*>(w.raw());
  const auto* bytes = static_cast<const uint8_t*>(p.raw());
  const uint8_t* blk = bytes + (2 * n_blocks + 1) * kPanelBlockBytes;
  const quant::BlockQ8_0& src = rows[37 * n_blocks + 1];
  uint16_t d;
  std::memcpy(&d, blk + 2 * 5, 2);
  EXPECT_EQ(d, src.d);
  for (int v = 0; v < 32; ++v) {
    EXPECT_EQ(blk[32 + 64 * (v / 4) + 4 * 5 + v % 4], uint8_t(src.qs[v] + 128)) << v;
  }
  // Rows not a multiple of 16, or not Q8_0, stay as stored.
  EXPECT_FALSE(q8_0_panels_fit(random_quantized(rng, DType::kQ8_0, 40, 64)));
  EXPECT_FALSE(q8_0_panels_fit(random_quantized(rng, DType::kQ4_0, 32, 64)));
}

// Every isa this CPU has (the scalar loop everywhere; AVX-VNNI and AVX-512
// VNNI kernels where it has them), 1-17 activation rows,
// panels 1 and 5, blocks 1, 3 and 64, with and without bias; extreme bytes.
TEST(QuantPanels, MatmulEqualsBlocksumReferenceBitForBit) {
  ThreadPool pool(3);
  std::mt19937 rng(1616);
  std::vector<Isa> isas = {Isa::kScalar};
  for (Isa isa : {Isa::kAvxVnni, Isa::kAvx512Vnni})
    if (quant_panels_available(isa)) isas.push_back(isa);
  for (Isa isa : isas) {
    for (int64_t out : {16, 80}) {
      for (int64_t in : {32, 96, 2048}) {
        for (int64_t n : {1, 2, 3, 4, 5, 8, 16, 17}) {
          if (in == 2048 && n > 5 && n != 16) continue;  // keep the scalar loop short
          Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
          if (n == 3) {  // the byte extremes of q (q + 128 = 0 and 255)
            auto* blocks = static_cast<quant::BlockQ8_0*>(w.raw());
            for (int64_t b = 0; b < out * in / 32; ++b)
              for (int j = 0; j < 32; ++j) blocks[b].qs[j] = (j + b) % 2 ? 127 : -128;
          }
          Tensor packed = repack_q8_0_panels(pool, w);
          Tensor x = activations(rng, n, in);
          Tensor bias = random_f32(rng, {out});
          for (const Tensor* b : std::vector<const Tensor*>{nullptr, &bias}) {
            Tensor y = Tensor::zeros(DType::kF32, {n, out});
            matmul_q8_0_panels(pool, x, packed, b, y, isa);
            expect_reference(y, w, x, b, isa_name(isa));
          }
        }
      }
    }
  }
}

// matmul() on panels: up to kPanelMaxRows rows the panel kernels, above
// them the block-sum GEMM on the unpacked rows (the same floats as on the
// Q8_0 rows) where the CPU has it, else the dequantized weights + sgemm.
TEST(QuantPanels, MatmulDispatchAndPrefillAgree) {
  ThreadPool pool(2);
  std::mt19937 rng(77);
  const int64_t out = 64, in = 256;
  Tensor w = random_quantized(rng, DType::kQ8_0, out, in);
  Tensor packed = repack_q8_0_panels(pool, w);
  for (int64_t n : {int64_t{1}, int64_t{16}, int64_t{17}, int64_t{40}, kPanelMaxRows + 1}) {
    Tensor x = activations(rng, n, in);
    Tensor y = Tensor::zeros(DType::kF32, {n, out});
    matmul(pool, x, packed, nullptr, y);
    if (n <= kPanelMaxRows || quant_blocksum_available(DType::kQ8_0P, quant_best_isa())) {
      expect_reference(y, w, x, nullptr, "matmul");
    } else {
      Tensor ref = Tensor::zeros(DType::kF32, {n, out});
      matmul_large(pool, x, w, nullptr, ref);  // dequantized Q8_0 rows + sgemm
      for (int64_t i = 0; i < n * out; ++i) EXPECT_EQ(y.f32()[i], ref.f32()[i]) << i;
    }
  }
  // The dequantized panels are the dequantized rows.
  std::vector<float> a(size_t(out * in)), b(size_t(out * in));
  dequantize_rows(w, 0, out, a.data());
  dequantize_rows(packed, 0, out, b.data());
  EXPECT_EQ(a, b);
}

TEST(QuantPanels, AvailableWithVnniOnly) {
  EXPECT_FALSE(quant_panels_available(Isa::kScalar));
  EXPECT_FALSE(quant_panels_available(Isa::kAvx2));
  EXPECT_EQ(quant_panels_available(Isa::kAvxVnni), quant_isa_available(Isa::kAvxVnni));
  EXPECT_EQ(quant_panels_available(Isa::kAvx512Vnni), quant_isa_available(Isa::kAvx512Vnni));
}

}  // namespace
}  // namespace specstack::cpu

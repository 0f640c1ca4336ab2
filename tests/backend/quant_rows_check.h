// The four-row quantized kernels (QuantKernel::dot4) against the one-row
// ones (QuantKernel::dot) of the same isa: equal bit for bit per row, since
// each row runs the same integer sums and the same f32 steps in the same
// order; only the interleaving of the rows' memory streams differs. Shared
// by quant_matmul_test (scalar, AVX2) and quant_vnni_test (AVX-512 VNNI).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "base/thread_pool.h"
#include "cpu_test_helpers.h"
#include "quant_test_helpers.h"

namespace specstack::testing {

inline uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

// dot4 on rows 0, 2, 4, 6 of an 8-row matrix (a stride of two rows, so a
// kernel that assumed adjacent rows fails) equals dot on each, for row
// lengths of 1 .. 17 blocks (odd counts: the 32-blocks' one-block tail).
inline void expect_dot4_equals_dot(DType dtype, cpu::Isa isa, uint32_t seed) {
  const cpu::QuantKernel k = cpu::quant_kernel(dtype, isa);
  std::mt19937 rng(seed);
  const int64_t blk = dtype_block_elements(dtype);
  for (int64_t n_blocks : {1, 2, 3, 4, 5, 8, 11, 17}) {
    for (int trial = 0; trial < 8; ++trial) {
      const int64_t in = n_blocks * blk;
      Tensor w = random_quantized(rng, dtype, 8, in);
      Tensor x = random_f32(rng, {in}, -2.0f, 2.0f);
      for (int64_t i = trial % 7; i < in; i += 29) x.f32()[i] *= 30.0f;
      std::vector<uint8_t> act(size_t(in / k.act_block_elements) * k.act_block_bytes);
      cpu::quantize_activations(k.act, x.f32(), in, act.data());
      const int64_t row_bytes = int64_t(dtype_bytes(dtype, in));
      const auto* base = static_cast<const uint8_t*>(w.raw());
      float four[4] = {-1.0f, -1.0f, -1.0f, -1.0f};
      k.dot4(base, 2 * row_bytes, act.data(), n_blocks, four);
      for (int r = 0; r < 4; ++r) {
        const float one = k.dot(base + 2 * r * row_bytes, act.data(), n_blocks);
        ASSERT_EQ(float_bits(four[r]), float_bits(one))
            << dtype_name(dtype) << " " << cpu::isa_name(isa) << " n_blocks=" << n_blocks
            << " trial=" << trial << " row " << r << ": dot4 " << four[r] << " dot " << one;
      }
    }
  }
}

// matmul_quant (four rows per pass, one-row tails, threads, bias) equals the
// one-row kernel plus bias on every output, for 1 .. 9 output features and
// 1 or 3 activation rows.
inline void expect_matmul_equals_one_row(DType dtype, cpu::Isa isa, uint32_t seed) {
  const cpu::QuantKernel k = cpu::quant_kernel(dtype, isa);
  ThreadPool pool(3);
  std::mt19937 rng(seed);
  const int64_t in = 5 * dtype_block_elements(dtype);
  const int64_t n_blocks = in / k.act_block_elements;
  const int64_t row_bytes = int64_t(dtype_bytes(dtype, in));
  for (int64_t out = 1; out <= 9; ++out) {
    for (int64_t n : {1, 3}) {
      Tensor w = random_quantized(rng, dtype, out, in);
      Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
      Tensor bias = random_f32(rng, {out});
      Tensor y = Tensor::zeros(DType::kF32, {n, out});
      cpu::matmul_quant(pool, x, w, &bias, y, isa);
      std::vector<uint8_t> act(size_t(n_blocks) * k.act_block_bytes);
      for (int64_t i = 0; i < n; ++i) {
        cpu::quantize_activations(k.act, x.f32() + i * in, in, act.data());
        for (int64_t o = 0; o < out; ++o) {
          const auto* row = static_cast<const uint8_t*>(w.raw()) + o * row_bytes;
          const float ref = k.dot(row, act.data(), n_blocks) + bias.f32()[o];
          ASSERT_EQ(float_bits(y.f32()[i * out + o]), float_bits(ref))
              << dtype_name(dtype) << " " << cpu::isa_name(isa) << " out=" << out << " n=" << n
              << " i=" << i << " o=" << o;
        }
      }
    }
  }
}

}  // namespace specstack::testing

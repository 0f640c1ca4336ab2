// rope_write_kv against its unfused GPU twin (rope() over q and k, then
// write_kv(), both tested against CpuBackend in elementwise_test.cpp): the
// same rotated rows, the same cache slots, untouched slots left as they were,
// with two (head, j) pairs a thread (head_dim % 4 == 0) and with one.
#include "cuda/rope_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "cuda/elementwise.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {
namespace {

struct Shape {
  int32_t n_tokens, n_heads, n_kv_heads, head_dim;
};

TEST(CudaRopeKv, FusedEqualsRopeThenWriteKv) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (const Shape& c : {Shape{1, 28, 4, 128}, Shape{2, 28, 4, 128}, Shape{3, 7, 3, 96},
                         Shape{37, 14, 2, 64}, Shape{5, 4, 2, 16}, Shape{300, 8, 8, 32},
                         // head_dim % 4 == 2: one pair a thread (the others take two)
                         Shape{4, 3, 1, 6}, Shape{9, 5, 5, 10}}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << c.n_tokens << " heads " << c.n_heads << "/"
                                      << c.n_kv_heads << " head_dim " << c.head_dim);
    const int64_t kv_width = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t ld = int64_t{c.n_heads + 2 * c.n_kv_heads} * c.head_dim + 8;  // padded rows
    const int32_t n_slots = 2 * c.n_tokens + 7;
    auto qkv = random_values(rng, size_t(c.n_tokens * ld));
    std::vector<int32_t> positions(static_cast<size_t>(c.n_tokens));
    std::vector<int32_t> slots(static_cast<size_t>(n_slots));
    std::uniform_int_distribution<int32_t> pos(0, 131071);
    for (auto& p : positions) p = pos(rng);
    for (int32_t i = 0; i < n_slots; ++i) slots[size_t(i)] = i;
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<int32_t> slot_mapping(slots.begin(), slots.begin() + c.n_tokens);
    slot_mapping[0] = -1;  // a padding row: rotated, not stored
    std::vector<float> inv_freq(size_t(c.head_dim / 2));
    for (size_t j = 0; j < inv_freq.size(); ++j) {
      inv_freq[j] = 1.0f / std::pow(10000.0f, 2.0f * float(j) / float(c.head_dim));
    }
    auto d_pos = upload(positions);
    auto d_map = upload(slot_mapping);
    auto d_freq = upload(inv_freq);
    std::vector<float> rows[2], kc[2], vc[2];
    std::vector<int32_t> sp[2];
    // Without and with a QKV bias (fused: added inside; twin: add_bias first).
    const std::vector<float> bias_values = random_values(rng, size_t(ld));
    auto d_bias = upload(bias_values);
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "with bias" : "no bias");
      const float* bias = with_bias ? d_bias.data() : nullptr;
      for (int fused = 0; fused < 2; ++fused) {
        auto d_qkv = upload(to_bf16(qkv));
        DeviceBuffer<__nv_bfloat16> d_k(size_t(n_slots * kv_width)),
            d_v(size_t(n_slots * kv_width));
        DeviceBuffer<int32_t> d_sp(static_cast<size_t>(n_slots));
        d_k.fill_bytes(0xFF);
        d_v.fill_bytes(0xFF);
        d_sp.fill_bytes(0x7F);
        if (fused) {
          rope_write_kv(d_qkv.data(), c.n_tokens, ld, c.n_heads, c.n_kv_heads, c.head_dim,
                        d_pos.data(), d_freq.data(), d_map.data(), d_k.data(), d_v.data(),
                        d_sp.data(), bias, nullptr);
        } else {
          const int64_t q_width = int64_t{c.n_heads} * c.head_dim;
          if (bias != nullptr) {
            add_bias(d_qkv.data(), c.n_tokens, static_cast<int32_t>(ld - 8), ld, bias, nullptr);
          }
          rope(d_qkv.data(), c.n_tokens, ld, c.n_heads + c.n_kv_heads, c.head_dim, d_pos.data(),
               d_freq.data(), nullptr);
          write_kv(d_qkv.data() + q_width, d_qkv.data() + q_width + kv_width, ld, c.n_tokens,
                   static_cast<int32_t>(kv_width), d_map.data(), d_pos.data(), d_k.data(),
                   d_v.data(), d_sp.data(), nullptr);
        }
        SS_CUDA_CHECK(cudaDeviceSynchronize());
        rows[fused] = to_f32(d_qkv.download());
        kc[fused] = to_f32(d_k.download());
        vc[fused] = to_f32(d_v.download());
        sp[fused] = d_sp.download();
      }
      // Rotated rows (both rotate with the same fp32 formula; allow the odd
      // 1-ulp bf16 difference a different fma contraction could give).
      // (Every row element: q, k and v, biased in place in both.)
      EXPECT_LE(relative_error(rows[1], rows[0]), 1e-3);
      EXPECT_EQ(sp[1], sp[0]);
      // Cache slots: written ones equal, the rest still poisoned in both.
      ASSERT_EQ(kc[1].size(), kc[0].size());
      std::vector<float> k_written[2], v_written[2];
      int64_t poisoned_mismatch = 0;
      for (size_t i = 0; i < kc[0].size(); ++i) {
        const bool w0 = !std::isnan(kc[0][i]), w1 = !std::isnan(kc[1][i]);
        poisoned_mismatch += w0 != w1;
        if (w0 && w1) {
          k_written[0].push_back(kc[0][i]);
          k_written[1].push_back(kc[1][i]);
          v_written[0].push_back(vc[0][i]);
          v_written[1].push_back(vc[1][i]);
        }
      }
      EXPECT_EQ(poisoned_mismatch, 0);
      EXPECT_EQ(int64_t(k_written[0].size()), int64_t(c.n_tokens - 1) * kv_width);
      EXPECT_LE(relative_error(k_written[1], k_written[0]), 1e-3);
      EXPECT_EQ(v_written[1], v_written[0]);  // a plain copy: exact
    }
  }
}

}  // namespace
}  // namespace specstack::cuda::testing

// qkv_rope_gemv against its two-launch twin, gemv (or fp8_gemv) at one row
// followed by rope_write_kv (each tested against the CPU in gemv_test.cpp,
// fp8_test.cpp and rope_kv_test.cpp): the same rotated q and k, the same v,
// the same cache slots and slot position, bit for bit; nothing else written.
#include "cuda/qkv_rope_gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda/fp8_gemv.h"
#include "cuda/fp8_quantize.h"
#include "cuda/gemv.h"
#include "cuda/rope_kv.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {
namespace {

struct Shape {
  int32_t n_heads, n_kv_heads, head_dim, in;
};

std::vector<uint16_t> bits(const std::vector<__nv_bfloat16>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat16_as_ushort(v[i]);
  return out;
}

TEST(QkvRopeGemv, EqualsGemvThenRopeWriteKvBitForBit) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(43);
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  for (const Shape& c : {Shape{28, 4, 128, 3584}, Shape{14, 2, 64, 896}, Shape{8, 8, 64, 512},
                         Shape{6, 2, 96, 256}}) {
    const int64_t kv_width = int64_t{c.n_kv_heads} * c.head_dim;
    const int64_t width = int64_t{c.n_heads} * c.head_dim + 2 * kv_width;
    const int32_t n_slots = 11;
    const auto w_host = to_bf16(random_values(rng, size_t(width * c.in), -0.05f, 0.05f));
    auto w16 = upload(w_host);
    DeviceBuffer<fp8> w8(size_t(width * c.in));
    DeviceBuffer<float> w_scale{size_t(width)};
    quantize_rows_fp8(w16.data(), c.in, width, c.in, w8.data(), w_scale.data(), stream, false);
    auto x = upload(to_bf16(random_values(rng, size_t(c.in))));
    auto bias = upload(random_values(rng, size_t(width)));
    std::vector<float> inv_freq(size_t(c.head_dim / 2));
    for (size_t j = 0; j < inv_freq.size(); ++j) {
      inv_freq[j] = 1.0f / std::pow(10000.0f, 2.0f * float(j) / float(c.head_dim));
    }
    auto d_freq = upload(inv_freq);
    auto d_pos = upload(std::vector<int32_t>{int32_t(rng() % 100000)});
    for (const bool fp8_weights : {false, true}) {
      for (const bool with_bias : {false, true}) {
        for (const int32_t slot : {7, -1}) {
          SCOPED_TRACE(::testing::Message()
                       << "heads " << c.n_heads << "/" << c.n_kv_heads << " head_dim " << c.head_dim
                       << " fp8 " << fp8_weights << " bias " << with_bias << " slot " << slot);
          auto d_slot = upload(std::vector<int32_t>{slot});
          std::vector<uint16_t> qkv_out[2], k_out[2], v_out[2];
          std::vector<int32_t> sp_out[2];
          for (int fused = 0; fused < 2; ++fused) {
            DeviceBuffer<__nv_bfloat16> qkv{size_t(width)}, k{size_t(n_slots * kv_width)},
                v{size_t(n_slots * kv_width)};
            DeviceBuffer<int32_t> sp{size_t(n_slots)};
            qkv.fill_bytes(0xFF);
            k.fill_bytes(0xFF);
            v.fill_bytes(0xFF);
            sp.fill_bytes(0xFF);
            const float* b = with_bias ? bias.data() : nullptr;
            if (fused == 1) {
              QkvRopeArgs a;
              a.x = x.data();
              if (fp8_weights) {
                a.w8 = w8.data();
                a.w_scale = w_scale.data();
              } else {
                a.w16 = w16.data();
              }
              a.bias = b;
              a.in = c.in;
              a.n_heads = c.n_heads;
              a.n_kv_heads = c.n_kv_heads;
              a.head_dim = c.head_dim;
              a.position = d_pos.data();
              a.inv_freq = d_freq.data();
              a.slot = d_slot.data();
              a.qkv = qkv.data();
              a.k_cache = k.data();
              a.v_cache = v.data();
              a.slot_positions = sp.data();
              ASSERT_TRUE(qkv_rope_gemv_supported(a));
              qkv_rope_gemv(a, stream);
            } else {
              if (fp8_weights) {
                fp8_gemv(x.data(), c.in, w8.data(), w_scale.data(), 1, width, c.in, qkv.data(),
                         nullptr, width, b, stream);
              } else {
                gemv(x.data(), c.in, w16.data(), 1, width, c.in, qkv.data(), nullptr, width, stream,
                     b);
              }
              rope_write_kv(qkv.data(), 1, width, c.n_heads, c.n_kv_heads, c.head_dim, d_pos.data(),
                            d_freq.data(), d_slot.data(), k.data(), v.data(), sp.data(), nullptr,
                            stream);
            }
            SS_CUDA_CHECK(cudaStreamSynchronize(stream));
            qkv_out[fused] = bits(qkv.download());
            k_out[fused] = bits(k.download());
            v_out[fused] = bits(v.download());
            sp_out[fused] = sp.download();
          }
          EXPECT_EQ(qkv_out[1], qkv_out[0]);
          EXPECT_EQ(k_out[1], k_out[0]);
          EXPECT_EQ(v_out[1], v_out[0]);
          EXPECT_EQ(sp_out[1], sp_out[0]);
          // The twin wrote every qkv element (no poison left).
          for (uint16_t u : qkv_out[0]) ASSERT_NE(u, 0xFFFF);
        }
      }
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace specstack::cuda::testing

// The prefill attention test problem shared by the Hopper (bf16 wgmma) and
// FP8 attention tests: one sequence on shuffled physical blocks with NaN in
// every slot it does not own, its CPU twin (CpuBackend::attention) and the
// bf16 kernels' output (flash_attention with the Hopper path on or off).
#pragma once

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
#include "cuda/flash_attention.h"
#include "cuda/flash_attention_hopper.h"
#include "cuda_test_util.h"

namespace specstack::cuda::flash_test {

using testing::kBf16Tolerance;
using testing::random_values;
using testing::relative_error;
using testing::to_bf16;
using testing::to_f32;
using testing::upload;

// Skips without a Hopper GPU; on one, the build must carry the sm_90a kernel.
#define SS_REQUIRE_HOPPER()                                                                  \
  do {                                                                                       \
    SS_REQUIRE_GPU();                                                                        \
    int dev_ = 0, major_ = 0, minor_ = 0;                                                    \
    SS_CUDA_CHECK(cudaGetDevice(&dev_));                                                     \
    SS_CUDA_CHECK(cudaDeviceGetAttribute(&major_, cudaDevAttrComputeCapabilityMajor, dev_)); \
    SS_CUDA_CHECK(cudaDeviceGetAttribute(&minor_, cudaDevAttrComputeCapabilityMinor, dev_)); \
    if (major_ != 9 || minor_ != 0) GTEST_SKIP() << "not a Hopper (sm_90) GPU";              \
  } while (0)

// Restores the switch when a test ends, whatever it set.
struct HopperSwitch {
  ~HopperSwitch() { set_flash_attention_hopper_enabled(true); }
};

// Args of a 32 / 8-head shape with 16-byte aligned rows over a dummy buffer
// (nothing runs on them): what the *_supported checks look at.
inline FlashAttentionArgs shape_args(__nv_bfloat16* buf, int32_t head_dim) {
  FlashAttentionArgs a;
  a.q = a.k_cache = a.v_cache = buf;
  a.out = buf;
  a.q_stride = a.out_stride = 4096;
  a.n_heads = 32;
  a.n_kv_heads = 8;
  a.block_size = 16;
  a.head_dim = head_dim;
  return a;
}

enum class Positions { kDense, kSparse, kShuffled };

struct Case {
  int32_t head_dim = 128;
  int32_t group = 1, n_kv_heads = 1;
  int32_t n_rows = 1;      // queries in slots first_slot .. first_slot + n_rows - 1
  int32_t first_slot = 0;  // 0 = full prefill
  int32_t extra_keys = 0;  // n_keys = last query slot + 1 + extra_keys
  Positions positions = Positions::kDense;
  int32_t window = 0;
  int32_t block_size = 16;
  bool blind_rows = false;  // every third query's position is far ahead: it sees no key
  // Added to dim 5 of every key (each kv head): a channel outlier such as
  // Qwen2's k bias, which per-channel FP8 scales must absorb.
  float k_outlier = 0.0f;
};

// One sequence on shuffled physical blocks with NaN in every slot it does
// not own; both GPU paths and the CPU twin run on the same bf16 values.
struct Problem {
  Case c;
  int32_t n_keys = 0, n_heads = 0, row = 0;
  int64_t q_stride = 0, out_stride = 0;
  std::vector<int32_t> table, slot_pos, q_slot, q_pos;
  std::vector<float> k, v, q_full;  // cache [n_blocks, bs, kv, head_dim], q [n_rows, q_stride]
  std::vector<__nv_bfloat16> k_dev, v_dev;

  Problem(const Case& cs, uint32_t seed) : c(cs) {
    std::mt19937 rng(seed);
    const int32_t hd = c.head_dim, bs = c.block_size;
    n_heads = c.group * c.n_kv_heads;
    n_keys = c.first_slot + c.n_rows + c.extra_keys;
    const int32_t kv_width = c.n_kv_heads * hd;
    const int32_t n_logical = (n_keys + bs - 1) / bs, n_blocks = n_logical + 3;
    std::vector<int32_t> physical(static_cast<size_t>(n_blocks));
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    table.assign(physical.begin(), physical.begin() + n_logical);
    const size_t n_slots = static_cast<size_t>(n_blocks) * bs;
    k = random_values(rng, n_slots * kv_width);
    v = random_values(rng, n_slots * kv_width);
    if (c.k_outlier != 0.0f) {
      for (size_t e = 5; e < k.size(); e += hd) k[e] = testing::round_bf16(k[e] + c.k_outlier);
    }
    slot_pos.assign(n_slots, -7);
    std::vector<int32_t> perm(static_cast<size_t>(2 * n_keys));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<bool> owned(n_slots, false);
    for (int32_t j = 0; j < n_keys; ++j) {
      slot_pos[flat(j)] = c.positions == Positions::kDense    ? j
                          : c.positions == Positions::kSparse ? 5 * j + 2
                                                              : perm[j];
      owned[flat(j)] = true;
    }
    for (int32_t r = 0; r < c.n_rows; ++r) {
      q_slot.push_back(c.first_slot + r);
      q_pos.push_back(slot_pos[flat(q_slot[r])] + (c.blind_rows && r % 3 == 1 ? 1 << 20 : 0));
    }
    q_stride = int64_t{n_heads + 2 * c.n_kv_heads} * hd;  // a fused QKV buffer
    q_full = random_values(rng, c.n_rows * q_stride, -4.0f, 4.0f);
    row = n_heads * hd;
    out_stride = row + 8;
    k_dev = to_bf16(k);
    v_dev = to_bf16(v);
    for (size_t s = 0; s < n_slots; ++s) {
      if (owned[s]) continue;
      for (int32_t e = 0; e < kv_width; ++e) {
        k_dev[s * kv_width + e] = __float2bfloat16(NAN);
        v_dev[s * kv_width + e] = __float2bfloat16(NAN);
      }
    }
  }
  int32_t flat(int32_t slot) const {
    return table[slot / c.block_size] * c.block_size + slot % c.block_size;
  }

  std::vector<float> cpu() const {
    const int32_t hd = c.head_dim, n_blocks = static_cast<int32_t>(slot_pos.size()) / c.block_size;
    Tensor q = Tensor::zeros(DType::kF32, {c.n_rows, row});
    for (int32_t r = 0; r < c.n_rows; ++r) {
      std::copy_n(q_full.begin() + r * q_stride, row, q.f32() + r * row);
    }
    KvLayerView layer;
    layer.k = Tensor::zeros(DType::kF32, {n_blocks, c.block_size, c.n_kv_heads, hd});
    layer.v = Tensor::zeros(DType::kF32, {n_blocks, c.block_size, c.n_kv_heads, hd});
    layer.positions = Tensor::zeros(DType::kI32, {n_blocks, c.block_size});
    std::copy(k.begin(), k.end(), layer.k.f32());
    std::copy(v.begin(), v.end(), layer.v.f32());
    std::copy(slot_pos.begin(), slot_pos.end(), layer.positions.data<int32_t>());
    layer.block_size = c.block_size;
    layer.n_kv_heads = c.n_kv_heads;
    layer.head_dim = hd;
    const std::vector<int32_t> seq_n_slots = {n_keys};
    const std::vector<int32_t> q_seq(c.n_rows, 0);
    AttentionBatch batch;
    batch.token_seq = q_seq;
    batch.token_slot = q_slot;
    batch.token_pos = q_pos;
    batch.block_tables.emplace_back(table.data(), table.size());
    batch.seq_n_slots = seq_n_slots;
    const AttentionParams params{n_heads, c.n_kv_heads, hd, 1.0f / std::sqrt(float(hd)), c.window};
    Tensor out = Tensor::zeros(DType::kF32, {c.n_rows, row});
    CpuBackend backend(CpuBackendOptions{2});
    backend.attention(q, batch, layer, params, out);
    return std::vector<float>(out.f32(), out.f32() + int64_t{c.n_rows} * row);
  }

  // Raw output [n_rows, out_stride] of flash_attention with the Hopper path on or off.
  std::vector<__nv_bfloat16> gpu(bool hopper) const {
    set_flash_attention_hopper_enabled(hopper);
    std::vector<__nv_bfloat16> out = run([&](const FlashAttentionArgs& a) {
      EXPECT_EQ(flash_attention_hopper_supported(a), hopper)
          << "on Hopper the build must carry the sm_90a kernel (CMAKE_CUDA_ARCHITECTURES 90a)";
      flash_attention(a, nullptr);
    });
    set_flash_attention_hopper_enabled(true);
    return out;
  }

  // Raw output [n_rows, out_stride] (poisoned 0xFF before) of attend(args) on
  // the problem's device copy, on the default stream.
  template <class Attend>
  std::vector<__nv_bfloat16> run(Attend&& attend) const {
    auto d_q = upload(to_bf16(q_full));
    auto d_k = upload(k_dev);
    auto d_v = upload(v_dev);
    auto d_pos = upload(slot_pos);
    auto d_table = upload(table);
    auto d_slot = upload(q_slot);
    auto d_qpos = upload(q_pos);
    DeviceBuffer<__nv_bfloat16> d_out(static_cast<size_t>(c.n_rows) * out_stride);
    d_out.fill_bytes(0xFF);
    FlashAttentionArgs a;
    a.q = d_q.data();
    a.q_stride = q_stride;
    a.q_slot = d_slot.data();
    a.q_pos = d_qpos.data();
    a.n_rows = c.n_rows;
    a.k_cache = d_k.data();
    a.v_cache = d_v.data();
    a.slot_positions = d_pos.data();
    a.block_table = d_table.data();
    a.block_size = c.block_size;
    a.n_keys = n_keys;
    a.n_heads = n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.scale = 1.0f / std::sqrt(float(c.head_dim));
    a.sliding_window = c.window;
    a.out = d_out.data();
    a.out_stride = out_stride;
    attend(a);
    SS_CUDA_CHECK(cudaDeviceSynchronize());
    return d_out.download();
  }
};

// Rows [n_rows, row] of a raw output; counts bits changed in the padding.
inline std::vector<float> rows_of(const Problem& pb, const std::vector<__nv_bfloat16>& raw,
                                  int64_t* padding_touched) {
  std::vector<float> out;
  const std::vector<float> full = to_f32(raw);
  for (int32_t r = 0; r < pb.c.n_rows; ++r) {
    out.insert(out.end(), full.begin() + r * pb.out_stride,
               full.begin() + r * pb.out_stride + pb.row);
    for (int64_t e = pb.row; e < pb.out_stride; ++e) {
      uint16_t bits;
      std::memcpy(&bits, &raw[r * pb.out_stride + e], sizeof(bits));
      *padding_touched += bits != 0xFFFF;
    }
  }
  return out;
}

}  // namespace specstack::cuda::flash_test

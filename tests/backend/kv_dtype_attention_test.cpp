// The CPU KV cache in bf16 / f16 (--kv-dtype): the row conversions (scalar
// and AVX2 give the same bits, round to nearest even), and paged attention
// over a bf16 / f16 cache against the same attention over an f32 cache, on
// both the direct (decode) and the GEMM (prefill) path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/quant_kernels.h"

namespace specstack {
namespace {

using cpu::Isa;
using cpu::kv_row_codec;

std::vector<float> test_values(uint32_t seed, int64_t n) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x)
    v = normal(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20));
  // Specials and exact ties: 1 + 2^-8 is half way between two bf16 values
  // (rounds down to the even 1.0); 1 + 3·2^-8 rounds up to 1 + 2^-6. For
  // f16 the same with 2^-11.
  const float specials[] = {0.0f,
                            -0.0f,
                            INFINITY,
                            -INFINITY,
                            1e-40f,
                            -3e-39f,
                            65504.0f,
                            65520.0f,
                            1e5f,
                            6e-8f,
                            1.0f + 0x1p-8f,
                            1.0f + 3 * 0x1p-8f,
                            1.0f + 0x1p-11f,
                            1.0f + 3 * 0x1p-11f,
                            -(1.0f + 0x1p-8f),
                            -(1.0f + 0x1p-11f)};
  std::copy(std::begin(specials), std::end(specials), x.begin());
  return x;
}

TEST(KvRows, RoundTripsRoundToNearestEvenAndAvx2EqualsScalar) {
  const int64_t n = 1000;  // not a multiple of 8: the AVX2 tails run too
  const std::vector<float> x = test_values(7, n);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const cpu::KvRowCodec scalar = kv_row_codec(dtype, Isa::kScalar);
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n));
    scalar.store(x.data(), n, bits.data());
    scalar.load(bits.data(), n, back.data());
    // Unit roundoff: 8 significant bits (bf16) or 11 (f16); f16 subnormals
    // have an absolute spacing of 2^-24, bf16 ones (f32 subnormals) 2^-133.
    const double u = dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
    const double abs_floor = dtype == DType::kBF16 ? 0x1p-134 : 0x1p-25;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[size_t(i)], r = back[size_t(i)];
      if (std::isinf(v) || (dtype == DType::kF16 && std::fabs(v) > 65519.0)) {
        EXPECT_TRUE(std::isinf(r)) << v;
        continue;
      }
      if (dtype == DType::kBF16 || std::fabs(v) >= 0x1p-14) {
        EXPECT_LE(std::fabs(r - v), u * std::fabs(v) + abs_floor) << v;
      } else {
        EXPECT_LE(std::fabs(r - v), abs_floor) << v;
      }
    }
    const float tie_down = dtype == DType::kBF16 ? 1.0f + 0x1p-8f : 1.0f + 0x1p-11f;
    const float tie_up = dtype == DType::kBF16 ? 1.0f + 3 * 0x1p-8f : 1.0f + 3 * 0x1p-11f;
    const float up_to = dtype == DType::kBF16 ? 1.0f + 0x1p-6f : 1.0f + 0x1p-9f;
    const auto at = [&](float value) {
      return back[size_t(std::find(x.begin(), x.end(), value) - x.begin())];
    };
    EXPECT_EQ(at(tie_down), 1.0f);
    EXPECT_EQ(at(tie_up), up_to);
    EXPECT_EQ(at(-tie_down), -1.0f);

    if (!cpu::quant_isa_available(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
    const cpu::KvRowCodec avx2 = kv_row_codec(dtype, Isa::kAvx2);
    std::vector<uint16_t> bits2(static_cast<size_t>(n));
    std::vector<float> back2(static_cast<size_t>(n));
    avx2.store(x.data(), n, bits2.data());
    avx2.load(bits.data(), n, back2.data());
    EXPECT_EQ(bits2, bits);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::memcmp(&back2[i], &back[i], 4), 0) << i;
    // NaN stays NaN (its payload may differ between the two).
    const float nan = std::nanf("");
    uint16_t b1 = 0, b2 = 0;
    scalar.store(&nan, 1, &b1);
    std::vector<float> nans(9, nan);
    std::vector<uint16_t> nan_bits(9);
    avx2.store(nans.data(), 9, nan_bits.data());
    b2 = nan_bits[0];
    float f1 = 0, f2 = 0;
    scalar.load(&b1, 1, &f1);
    scalar.load(&b2, 1, &f2);
    EXPECT_TRUE(std::isnan(f1));
    EXPECT_TRUE(std::isnan(f2));
  }
}

TEST(KvRows, FusedGroupLoopsAgreeBetweenScalarAndAvx2) {
  if (!cpu::quant_isa_available(Isa::kAvx2)) GTEST_SKIP() << "no AVX2 + F16C on this CPU";
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t hd : {64, 100}) {  // 100: the AVX2 loops' scalar tails
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " hd " + std::to_string(hd));
      const int64_t n_heads = 7, stride = 3;
      std::vector<float> q(static_cast<size_t>(n_heads * hd));
      std::vector<float> x(static_cast<size_t>(hd));
      std::vector<float> w(static_cast<size_t>(n_heads * stride));
      for (auto& v : q) v = normal(rng);
      for (auto& v : x) v = normal(rng);
      for (auto& v : w) v = normal(rng);
      std::vector<uint8_t> row(size_t(hd) * dtype_size(dtype));
      kv_row_codec(dtype, Isa::kScalar).store(x.data(), hd, row.data());
      std::vector<float> s1(size_t(n_heads * stride)), s2 = s1;
      std::vector<float> a1(size_t(n_heads * hd), 0.5f), a2 = a1;
      const cpu::KvRowCodec scalar = kv_row_codec(dtype, Isa::kScalar);
      const cpu::KvRowCodec avx2 = kv_row_codec(dtype, Isa::kAvx2);
      scalar.dot_heads(q.data(), n_heads, hd, row.data(), 0.125f, s1.data(), stride);
      avx2.dot_heads(q.data(), n_heads, hd, row.data(), 0.125f, s2.data(), stride);
      scalar.axpy_heads(w.data(), stride, n_heads, row.data(), hd, a1.data());
      avx2.axpy_heads(w.data(), stride, n_heads, row.data(), hd, a2.data());
      for (int64_t h = 0; h < n_heads; ++h) {
        // Sums of hd products in another order: a few ulps of sum |q x|.
        double mag = 0;
        for (int64_t d = 0; d < hd; ++d) mag += std::fabs(q[size_t(h * hd + d)] * x[size_t(d)]);
        EXPECT_NEAR(s1[size_t(h * stride)], s2[size_t(h * stride)], 1e-6 * mag) << h;
      }
      // One FMA per element either way (a contraction may round once less).
      for (size_t i = 0; i < a1.size(); ++i)
        EXPECT_NEAR(a1[i], a2[i], 1e-6f * (1 + std::fabs(a1[i])));
    }
  }
}

struct Case {
  const char* name;
  int64_t n_heads, n_kv_heads, head_dim, block_size;
  std::vector<int32_t> n_cached;  // per sequence: slots written by an earlier step
  std::vector<int32_t> n_new;     // per sequence: query tokens of this step
};

struct Step {
  std::vector<int32_t> token_seq, token_slot, token_pos;
  AttentionBatch batch;
};

// Runs the cached write and then this step (write + attention) on a cache of
// `dtype`; returns the attention output [n_new_tokens, n_heads * head_dim].
struct Fixture {
  Case c;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> n_slots;
  int64_t n_blocks = 0;
  Step cached, fresh;
  Tensor k_cached, v_cached, k_new, v_new, q;

  Fixture(Case c_, uint32_t seed) : c(std::move(c_)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<int32_t> physical;
    for (size_t s = 0; s < c.n_cached.size(); ++s) {
      const int32_t total = c.n_cached[s] + c.n_new[s];
      n_slots.push_back(total);
      n_blocks += (total + c.block_size - 1) / c.block_size;
    }
    physical.resize(size_t(n_blocks));
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    size_t next = 0;
    tables.resize(c.n_cached.size());
    for (size_t s = 0; s < c.n_cached.size(); ++s) {
      for (int64_t b = 0; b < (n_slots[s] + c.block_size - 1) / c.block_size; ++b) {
        tables[s].push_back(physical[next++]);
      }
      for (int32_t i = 0; i < c.n_cached[s]; ++i) add(cached, int32_t(s), i);
    }
    for (int32_t i = 0;; ++i) {  // this step's tokens interleaved across sequences
      bool any = false;
      for (size_t s = 0; s < c.n_new.size(); ++s) {
        if (i < c.n_new[s]) add(fresh, int32_t(s), c.n_cached[s] + i), any = true;
      }
      if (!any) break;
    }
    finish(cached);
    finish(fresh);
    const int64_t kv_row = c.n_kv_heads * c.head_dim;
    auto random = [&](int64_t rows, int64_t cols) {
      Tensor t = Tensor::zeros(DType::kF32, {rows, cols});
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = normal(rng);
      return t;
    };
    const auto n_cached_tokens = int64_t(cached.token_seq.size());
    const auto n_new_tokens = int64_t(fresh.token_seq.size());
    k_cached = random(n_cached_tokens, kv_row);
    v_cached = random(n_cached_tokens, kv_row);
    k_new = random(n_new_tokens, kv_row);
    v_new = random(n_new_tokens, kv_row);
    q = random(n_new_tokens, c.n_heads * c.head_dim);
  }

  void add(Step& step, int32_t seq, int32_t slot) {
    step.token_seq.push_back(seq);
    step.token_slot.push_back(slot);
    step.token_pos.push_back(slot);
  }
  void finish(Step& step) {
    step.batch.token_seq = step.token_seq;
    step.batch.token_slot = step.token_slot;
    step.batch.token_pos = step.token_pos;
    for (const auto& t : tables) step.batch.block_tables.emplace_back(t);
    step.batch.seq_n_slots = n_slots;
  }

  KvLayerView layer(DType dtype) const {
    KvLayerView l;
    l.k = Tensor::zeros(dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim});
    l.v = Tensor::zeros(dtype, {n_blocks, c.block_size, c.n_kv_heads, c.head_dim});
    l.positions = Tensor::zeros(DType::kI32, {n_blocks, c.block_size});
    l.block_size = c.block_size;
    l.n_kv_heads = c.n_kv_heads;
    l.head_dim = c.head_dim;
    return l;
  }

  Tensor run(CpuBackend& backend, DType dtype, const Tensor& kc, const Tensor& vc, const Tensor& kn,
             const Tensor& vn) const {
    KvLayerView l = layer(dtype);
    if (!cached.token_seq.empty()) backend.write_kv(kc, vc, cached.batch, l);
    backend.write_kv(kn, vn, fresh.batch, l);
    AttentionParams params{c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)),
                           0};
    Tensor out = Tensor::zeros(DType::kF32, {q.size(0), c.n_heads * c.head_dim});
    backend.attention(q, fresh.batch, l, params, out);
    return out;
  }
};

// Each value rounded through `dtype` (what the cache holds).
Tensor rounded(const Tensor& x, DType dtype) {
  Tensor out = Tensor::zeros(DType::kF32, {x.size(0), x.size(1)});
  std::vector<uint16_t> bits(static_cast<size_t>(x.numel()));
  const cpu::KvRowCodec codec = kv_row_codec(dtype, Isa::kScalar);
  codec.store(x.f32(), x.numel(), bits.data());
  codec.load(bits.data(), x.numel(), out.f32());
  return out;
}

const Case kCases[] = {
    // Decode: a few query tokens per sequence take the direct path (GQA group 4).
    {"decode", 8, 2, 64, 16, {200, 37, 90}, {1, 2, 1}},
    // Prefill: >= 8 queries take the GEMM path; one sequence with a cached prefix.
    {"prefill", 4, 4, 128, 16, {0, 48}, {70, 33}},
};

TEST(KvDtypeAttention, EqualsF32AttentionOnTheRoundedValuesAndStaysInTheDerivedBound) {
  CpuBackend backend(CpuBackendOptions{2});
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const Fixture f(c, 11);
    const Tensor ref = f.run(backend, DType::kF32, f.k_cached, f.v_cached, f.k_new, f.v_new);
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(dtype_name(dtype));
      const Tensor ours = f.run(backend, dtype, f.k_cached, f.v_cached, f.k_new, f.v_new);
      // 1. Bit for bit the f32 kernel on K/V rounded the same way: the
      //    conversion on load is exact and the arithmetic is unchanged.
      const Tensor same =
          f.run(backend, DType::kF32, rounded(f.k_cached, dtype), rounded(f.v_cached, dtype),
                rounded(f.k_new, dtype), rounded(f.v_new, dtype));
      ASSERT_EQ(std::memcmp(ours.f32(), same.f32(), ours.nbytes()), 0);

      // 2. Against the f32 cache, within the bound the rounding allows. With
      //    |k̂ - k| <= u|k| and |v̂ - v| <= u|v| (u = 2^-8 bf16, 2^-11 f16;
      //    these N(0,1) values are far from f16's subnormals), each score moves
      //    by at most δ = scale·u·Σ|q||k|, so each softmax weight by a factor
      //    within e^{±2δ}, and every output value by at most
      //    (u + e^{2δ} - 1)·max|v| (+ f32 accumulation slack).
      const double u = dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
      const int64_t hd = c.head_dim, kv_row = c.n_kv_heads * hd, q_row = c.n_heads * hd;
      const int64_t group = c.n_heads / c.n_kv_heads;
      const double scale = 1.0 / std::sqrt(double(hd));
      double worst_ratio = 0, max_diff = 0;
      for (int64_t t = 0; t < f.q.size(0); ++t) {
        const auto s = size_t(f.fresh.token_seq[size_t(t)]);
        const int32_t last = f.fresh.token_slot[size_t(t)];
        // Key/value rows of slots [0, last] of sequence s, from the inputs.
        auto kv_of = [&](const Tensor& cached_t, const Tensor& new_t, int32_t slot) {
          const auto& seq_tokens = slot < c.n_cached[s] ? f.cached : f.fresh;
          const Tensor& src = slot < c.n_cached[s] ? cached_t : new_t;
          for (size_t i = 0; i < seq_tokens.token_seq.size(); ++i) {
            if (size_t(seq_tokens.token_seq[i]) == s && seq_tokens.token_slot[i] == slot) {
              return src.f32() + int64_t(i) * kv_row;
            }
          }
          ADD_FAILURE() << "slot not found";
          return src.f32();
        };
        for (int64_t h = 0; h < c.n_heads; ++h) {
          const int64_t g = h / group;
          const float* qh = f.q.f32() + t * q_row + h * hd;
          double delta = 0, vmax = 0;
          for (int32_t slot = 0; slot <= last; ++slot) {
            const float* k = kv_of(f.k_cached, f.k_new, slot) + g * hd;
            const float* v = kv_of(f.v_cached, f.v_new, slot) + g * hd;
            double qk = 0;
            for (int64_t d = 0; d < hd; ++d) {
              qk += std::fabs(double(qh[d]) * k[d]);
              vmax = std::max(vmax, std::fabs(double(v[d])));
            }
            delta = std::max(delta, scale * u * qk);
          }
          const double bound = (u + std::expm1(2 * delta)) * vmax + 1e-5 * vmax;
          for (int64_t d = 0; d < hd; ++d) {
            const double diff = std::fabs(double(ours.f32()[t * q_row + h * hd + d]) -
                                          ref.f32()[t * q_row + h * hd + d]);
            ASSERT_LE(diff, bound) << "t " << t << " h " << h << " d " << d;
            worst_ratio = std::max(worst_ratio, diff / bound);
            max_diff = std::max(max_diff, diff);
          }
        }
      }
      EXPECT_GT(max_diff, 0.0);  // the rounding is really there
      std::printf("[ %s %s ] max |diff| %.3g, worst diff/bound %.3f\n", c.name, dtype_name(dtype),
                  max_diff, worst_ratio);
    }
  }
}

}  // namespace
}  // namespace specstack

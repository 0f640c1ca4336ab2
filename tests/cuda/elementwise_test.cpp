// The elementwise kernels against their CPU twins: CpuBackend ops (embedding,
// rmsnorm, add_inplace + rmsnorm, rope, silu_mul) within bf16 tolerance, and
// plain references for the copies and conversions, which must be bit exact
// (embedding, write_kv, gather_rows, add_bias, convert_to_bf16, the dummy
// fill). Shapes cover head_dim 16/32/64/128, odd sizes and strides that force
// the scalar paths, and the fused QKV layout (row stride > heads * head_dim).
// Outputs are poisoned (0xFF = NaN) and regions a kernel must not touch are
// checked unchanged.
#include "cuda/elementwise.h"

#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cuda/cuda_test_util.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace specstack::cuda {
namespace {

namespace ct = ::specstack::cuda::testing;
using bf16_t = __nv_bfloat16;

Tensor f32_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(DType::kF32, std::move(shape));
  SS_CHECK_EQ(static_cast<size_t>(t.numel()), values.size());
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

uint16_t bits_of(bf16_t v) {
  return static_cast<__nv_bfloat16_raw>(v).x;
}

bf16_t from_bits(uint16_t bits) {
  __nv_bfloat16_raw raw;
  raw.x = bits;
  return bf16_t(raw);
}

// Bit equality of two bf16 arrays, reporting the first difference.
void expect_same_bits(const std::vector<bf16_t>& got, const std::vector<bf16_t>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << what << " differs at " << i;
  }
}

// Device copy of a host array placed `offset` elements into the buffer, so a
// test can hand a kernel a pointer that is not 16-byte aligned.
template <typename T>
DeviceBuffer<T> upload_at(const std::vector<T>& host, size_t offset) {
  std::vector<T> padded(offset + host.size());
  std::copy(host.begin(), host.end(), padded.begin() + static_cast<std::ptrdiff_t>(offset));
  return ct::upload(padded);
}

TEST(CudaElementwise, EmbeddingIsExact) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(11);
  CpuBackend cpu(CpuBackendOptions{2});
  struct Case {
    int32_t vocab, dim, n;
    size_t offset;  // table offset in elements: 1 forces the scalar path
  };
  for (const Case& c :
       {Case{100, 16, 1, 0}, Case{1000, 64, 7, 0}, Case{300, 128, 33, 0}, Case{50, 100, 5, 0},
        Case{64, 4096, 3, 0}, Case{40, 32, 9, 1}, Case{17, 7, 4, 0}}) {
    SCOPED_TRACE(::testing::Message() << "vocab " << c.vocab << " dim " << c.dim);
    const std::vector<float> table = ct::random_values(rng, size_t(c.vocab) * c.dim);
    std::vector<int32_t> ids(c.n);
    for (auto& id : ids) id = static_cast<int32_t>(rng() % c.vocab);
    ids.back() = c.vocab - 1;

    Tensor cpu_table = Tensor::zeros(DType::kBF16, {c.vocab, c.dim});
    for (size_t i = 0; i < table.size(); ++i) cpu_table.data<uint16_t>()[i] = f32_to_bf16(table[i]);
    Tensor want = Tensor::zeros(DType::kF32, {c.n, c.dim});
    cpu.embedding(cpu_table, ids, want);

    auto d_table = upload_at(ct::to_bf16(table), c.offset);
    auto d_ids = ct::upload(ids);
    DeviceBuffer<float> d_out(size_t(c.n) * c.dim);
    d_out.fill_bytes(0xFF);
    embedding(d_table.data() + c.offset, d_ids.data(), c.n, c.dim, d_out.data(), nullptr);
    EXPECT_EQ(d_out.download(), values_of(want));
  }
}

// y = rmsnorm(x[row_ids]) and the fused residual add + rmsnorm.
TEST(CudaElementwise, RmsnormMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(12);
  CpuBackend cpu(CpuBackendOptions{2});
  const float eps = 1e-6f;
  for (int32_t dim : {16, 32, 64, 96, 128, 100, 7, 1024, 4096, 8192}) {
    for (int32_t rows : {1, 5, 37}) {
      for (bool gather : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "dim " << dim << " rows " << rows << " gather " << gather);
        // x has extra rows; row_ids pick a shuffled subset of them.
        const int32_t x_rows = gather ? rows + 4 : rows;
        const std::vector<float> x = ct::random_values(rng, size_t(x_rows) * dim, -2.0f, 2.0f);
        const std::vector<float> w = ct::random_values(rng, size_t(dim), 0.5f, 1.5f);
        std::vector<int32_t> row_ids(static_cast<size_t>(x_rows));
        std::iota(row_ids.begin(), row_ids.end(), 0);
        std::shuffle(row_ids.begin(), row_ids.end(), rng);
        row_ids.resize(static_cast<size_t>(rows));

        std::vector<float> picked;
        for (int32_t i = 0; i < rows; ++i) {
          const int32_t r = gather ? row_ids[size_t(i)] : i;
          picked.insert(picked.end(), x.begin() + int64_t(r) * dim,
                        x.begin() + int64_t(r + 1) * dim);
        }
        Tensor want = Tensor::zeros(DType::kF32, {rows, dim});
        cpu.rmsnorm(f32_tensor(picked, {rows, dim}), f32_tensor(w, {dim}), eps, want);

        auto d_x = ct::upload(x);
        auto d_w = ct::upload(w);
        auto d_ids = ct::upload(row_ids);
        DeviceBuffer<bf16_t> d_y(size_t(rows) * dim);
        d_y.fill_bytes(0xFF);
        rmsnorm(d_x.data(), gather ? d_ids.data() : nullptr, d_w.data(), eps, rows, dim, d_y.data(),
                nullptr);
        EXPECT_LE(ct::relative_error(ct::to_f32(d_y.download()), values_of(want)),
                  ct::kBf16Tolerance);
      }
    }
  }
}

TEST(CudaElementwise, AddRmsnormMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(13);
  CpuBackend cpu(CpuBackendOptions{2});
  const float eps = 1e-5f;
  for (int32_t dim : {16, 32, 64, 96, 128, 100, 7, 4096, 8192}) {
    for (int32_t rows : {1, 6, 29}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " rows " << rows);
      const std::vector<float> x = ct::random_values(rng, size_t(rows) * dim, -3.0f, 3.0f);
      const std::vector<float> delta = ct::random_values(rng, size_t(rows) * dim);
      const std::vector<float> w = ct::random_values(rng, size_t(dim), 0.5f, 1.5f);

      Tensor x_cpu = f32_tensor(x, {rows, dim});
      cpu.add_inplace(x_cpu, f32_tensor(delta, {rows, dim}));
      Tensor want = Tensor::zeros(DType::kF32, {rows, dim});
      cpu.rmsnorm(x_cpu, f32_tensor(w, {dim}), eps, want);

      auto d_x = ct::upload(x);
      auto d_delta = ct::upload(ct::to_bf16(delta));
      auto d_w = ct::upload(w);
      DeviceBuffer<bf16_t> d_y(size_t(rows) * dim);
      d_y.fill_bytes(0xFF);
      add_rmsnorm(d_x.data(), d_delta.data(), d_w.data(), eps, rows, dim, d_y.data(), nullptr);
      // One fp32 add per element on both sides: the residual is bit exact.
      EXPECT_EQ(d_x.download(), values_of(x_cpu));
      EXPECT_LE(ct::relative_error(ct::to_f32(d_y.download()), values_of(want)),
                ct::kBf16Tolerance);
    }
  }
}

// A fused QKV buffer [n, (n_heads + 2 * n_kv) * head_dim (+ pad)]: returns
// the heads [first_head, first_head + heads) of every token as a dense f32
// [n, heads * head_dim] tensor.
Tensor heads_of(const std::vector<float>& qkv, int32_t n, int64_t ld, int32_t first_head,
                int32_t heads, int32_t head_dim) {
  std::vector<float> out;
  for (int32_t t = 0; t < n; ++t) {
    const auto row = qkv.begin() + t * ld + int64_t(first_head) * head_dim;
    out.insert(out.end(), row, row + int64_t(heads) * head_dim);
  }
  return f32_tensor(out, {n, int64_t(heads) * head_dim});
}

struct QkvShape {
  int32_t n_tokens, n_heads, n_kv, head_dim, pad;  // pad: extra columns per row
  int64_t ld() const { return int64_t(n_heads + 2 * n_kv) * head_dim + pad; }
};

const QkvShape kQkvShapes[] = {
    {1, 4, 2, 16, 0},  {5, 4, 2, 32, 0}, {17, 8, 2, 64, 0}, {3, 32, 8, 128, 0},
    {9, 2, 1, 128, 8}, {4, 3, 1, 20, 0}, {6, 2, 2, 18, 1},  {7, 4, 4, 64, 3},
};

// q_norm / k_norm in place on the q and k parts of the fused buffer; v and
// the padding must not change.
TEST(CudaElementwise, HeadRmsnormMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(14);
  CpuBackend cpu(CpuBackendOptions{2});
  const float eps = 1e-6f;
  for (const QkvShape& s : kQkvShapes) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << s.head_dim << " ld " << s.ld());
    const int64_t ld = s.ld();
    const std::vector<float> qkv = ct::random_values(rng, size_t(s.n_tokens * ld), -2.0f, 2.0f);
    const std::vector<float> wq = ct::random_values(rng, size_t(s.head_dim), 0.5f, 1.5f);
    const std::vector<float> wk = ct::random_values(rng, size_t(s.head_dim), 0.5f, 1.5f);
    auto d_qkv = ct::upload(ct::to_bf16(qkv));
    auto d_wq = ct::upload(wq);
    auto d_wk = ct::upload(wk);
    head_rmsnorm(d_qkv.data(), s.n_tokens, ld, s.n_heads, s.head_dim, d_wq.data(), eps, nullptr);
    head_rmsnorm(d_qkv.data() + int64_t(s.n_heads) * s.head_dim, s.n_tokens, ld, s.n_kv, s.head_dim,
                 d_wk.data(), eps, nullptr);
    const std::vector<float> got = ct::to_f32(d_qkv.download());

    for (const auto& [first, heads, w] :
         {std::tuple{0, s.n_heads, &wq}, std::tuple{s.n_heads, s.n_kv, &wk}}) {
      Tensor x = heads_of(qkv, s.n_tokens, ld, first, heads, s.head_dim)
                     .reshape({int64_t(s.n_tokens) * heads, s.head_dim});
      Tensor want = Tensor::zeros(DType::kF32, x.shape());
      cpu.rmsnorm(x, f32_tensor(*w, {s.head_dim}), eps, want);
      Tensor have = heads_of(got, s.n_tokens, ld, first, heads, s.head_dim);
      EXPECT_LE(ct::relative_error(values_of(have), values_of(want)), ct::kBf16Tolerance)
          << "first head " << first;
    }
    const int32_t untouched_from = (s.n_heads + s.n_kv) * s.head_dim;  // v, then the pad
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      for (int64_t c = untouched_from; c < ld; ++c) ASSERT_EQ(got[t * ld + c], qkv[t * ld + c]);
    }
  }
}

// RoPE on q and k of the fused buffer at positions up to 131072, theta 1e6.
TEST(CudaElementwise, RopeMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(15);
  CpuBackend cpu(CpuBackendOptions{2});
  for (const QkvShape& s : kQkvShapes) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << s.head_dim << " ld " << s.ld());
    const int64_t ld = s.ld();
    const int32_t half = s.head_dim / 2;
    const std::vector<float> qkv = ct::random_values(rng, size_t(s.n_tokens * ld));
    std::vector<float> inv_freq(static_cast<size_t>(half));
    for (int32_t j = 0; j < half; ++j) {
      inv_freq[size_t(j)] = 1.0f / std::pow(1e6f, float(2 * j) / float(s.head_dim));
    }
    std::vector<int32_t> positions(static_cast<size_t>(s.n_tokens));
    for (auto& p : positions) p = static_cast<int32_t>(rng() % 131073);
    positions[0] = 131072;

    auto d_qkv = ct::upload(ct::to_bf16(qkv));
    auto d_pos = ct::upload(positions);
    auto d_freq = ct::upload(inv_freq);
    rope(d_qkv.data(), s.n_tokens, ld, s.n_heads, s.head_dim, d_pos.data(), d_freq.data(), nullptr);
    rope(d_qkv.data() + int64_t(s.n_heads) * s.head_dim, s.n_tokens, ld, s.n_kv, s.head_dim,
         d_pos.data(), d_freq.data(), nullptr);
    const std::vector<float> got = ct::to_f32(d_qkv.download());

    const Tensor freq = f32_tensor(inv_freq, {half});
    for (const auto& [first, heads] : {std::pair{0, s.n_heads}, std::pair{s.n_heads, s.n_kv}}) {
      Tensor want = heads_of(qkv, s.n_tokens, ld, first, heads, s.head_dim);
      cpu.rope(want, s.head_dim, positions, freq);
      Tensor have = heads_of(got, s.n_tokens, ld, first, heads, s.head_dim);
      EXPECT_LE(ct::relative_error(values_of(have), values_of(want)), ct::kBf16Tolerance)
          << "first head " << first;
    }
    const int32_t untouched_from = (s.n_heads + s.n_kv) * s.head_dim;
    for (int32_t t = 0; t < s.n_tokens; ++t) {
      for (int64_t c = untouched_from; c < ld; ++c) ASSERT_EQ(got[t * ld + c], qkv[t * ld + c]);
    }
  }
}

// bf16(f32(x) + bias) is one fp32 add and one rounding: bit exact.
TEST(CudaElementwise, AddBiasIsExact) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(16);
  struct Case {
    int32_t rows, cols;
    int64_t ld;
  };
  for (const Case& c : {Case{1, 16, 16}, Case{5, 128, 384}, Case{3, 100, 100}, Case{7, 64, 65},
                        Case{2, 4096, 4096}, Case{4, 3, 5}}) {
    SCOPED_TRACE(::testing::Message() << "cols " << c.cols << " ld " << c.ld);
    const std::vector<float> x = ct::random_values(rng, size_t(c.rows * c.ld), -4.0f, 4.0f);
    const std::vector<float> bias = ct::random_values(rng, size_t(c.cols));
    std::vector<bf16_t> want = ct::to_bf16(x);
    for (int32_t r = 0; r < c.rows; ++r) {
      for (int32_t j = 0; j < c.cols; ++j) {
        want[size_t(r * c.ld + j)] = __float2bfloat16(x[size_t(r * c.ld + j)] + bias[size_t(j)]);
      }
    }
    auto d_x = ct::upload(ct::to_bf16(x));
    auto d_bias = ct::upload(bias);
    add_bias(d_x.data(), c.rows, c.cols, c.ld, d_bias.data(), nullptr);
    expect_same_bits(d_x.download(), want, "add_bias");
  }
}

TEST(CudaElementwise, SiluMulMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(17);
  CpuBackend cpu(CpuBackendOptions{2});
  for (int32_t width : {16, 96, 100, 7, 2048, 25600}) {
    for (int32_t rows : {1, 3, 17}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << " rows " << rows);
      const std::vector<float> gate_up =
          ct::random_values(rng, size_t(rows) * 2 * width, -6.0f, 6.0f);
      std::vector<float> gate, up;
      for (int32_t r = 0; r < rows; ++r) {
        const auto row = gate_up.begin() + int64_t(r) * 2 * width;
        gate.insert(gate.end(), row, row + width);
        up.insert(up.end(), row + width, row + 2 * width);
      }
      Tensor want = Tensor::zeros(DType::kF32, {rows, width});
      cpu.silu_mul(f32_tensor(gate, {rows, width}), f32_tensor(up, {rows, width}), want);

      auto d_gate_up = ct::upload(ct::to_bf16(gate_up));
      DeviceBuffer<bf16_t> d_out(size_t(rows) * width);
      d_out.fill_bytes(0xFF);
      silu_mul(d_gate_up.data(), rows, width, d_out.data(), nullptr);
      EXPECT_LE(ct::relative_error(ct::to_f32(d_out.download()), values_of(want)),
                ct::kBf16Tolerance);
    }
  }
}

// K and V rows of a fused buffer into scattered slots of a paged cache whose
// other slots hold junk that must survive; slot -1 rows are skipped.
TEST(CudaElementwise, WriteKvIsExact) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(18);
  struct Case {
    int32_t n_tokens, kv_width, q_width, n_slots;
  };
  for (const Case& c : {Case{1, 32, 64, 16}, Case{13, 1024, 4096, 64}, Case{9, 256, 512, 48},
                        Case{6, 20, 40, 12}, Case{5, 128, 131, 16}}) {
    SCOPED_TRACE(::testing::Message() << "kv_width " << c.kv_width << " q_width " << c.q_width);
    const int64_t ld = c.q_width + 2 * c.kv_width;  // [q | k | v] per token
    const std::vector<float> qkv = ct::random_values(rng, size_t(c.n_tokens * ld));
    std::vector<int32_t> slots(static_cast<size_t>(c.n_slots));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(static_cast<size_t>(c.n_tokens));
    if (c.n_tokens > 2) slots[1] = -1;  // a padding row
    std::vector<int32_t> positions(static_cast<size_t>(c.n_tokens));
    for (auto& p : positions) p = static_cast<int32_t>(rng() % 100000);

    const size_t cache_elems = size_t(c.n_slots) * c.kv_width;
    std::vector<bf16_t> k_cache = ct::to_bf16(ct::random_values(rng, cache_elems));
    std::vector<bf16_t> v_cache = ct::to_bf16(ct::random_values(rng, cache_elems));
    std::vector<int32_t> slot_pos(static_cast<size_t>(c.n_slots));
    for (auto& p : slot_pos) p = -7 - static_cast<int32_t>(rng() % 100);

    auto d_qkv = ct::upload(ct::to_bf16(qkv));
    auto d_slots = ct::upload(slots);
    auto d_pos = ct::upload(positions);
    auto d_k_cache = ct::upload(k_cache);
    auto d_v_cache = ct::upload(v_cache);
    auto d_slot_pos = ct::upload(slot_pos);
    write_kv(d_qkv.data() + c.q_width, d_qkv.data() + c.q_width + c.kv_width, ld, c.n_tokens,
             c.kv_width, d_slots.data(), d_pos.data(), d_k_cache.data(), d_v_cache.data(),
             d_slot_pos.data(), nullptr);

    const std::vector<bf16_t> src = ct::to_bf16(qkv);
    for (int32_t t = 0; t < c.n_tokens; ++t) {
      const int32_t s = slots[size_t(t)];
      if (s < 0) continue;
      for (int32_t j = 0; j < c.kv_width; ++j) {
        k_cache[size_t(s) * c.kv_width + j] = src[size_t(t * ld + c.q_width + j)];
        v_cache[size_t(s) * c.kv_width + j] = src[size_t(t * ld + c.q_width + c.kv_width + j)];
      }
      slot_pos[size_t(s)] = positions[size_t(t)];
    }
    expect_same_bits(d_k_cache.download(), k_cache, "k_cache");
    expect_same_bits(d_v_cache.download(), v_cache, "v_cache");
    EXPECT_EQ(d_slot_pos.download(), slot_pos);
  }
}

TEST(CudaElementwise, GatherRowsIsExact) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(19);
  struct Case {
    int32_t src_rows, n, cols;
    int64_t ld;
  };
  for (const Case& c : {Case{10, 4, 8, 8}, Case{50, 33, 128, 384}, Case{20, 7, 100, 100},
                        Case{9, 9, 64, 67}, Case{300, 256, 2048, 2048}}) {
    SCOPED_TRACE(::testing::Message() << "cols " << c.cols << " ld " << c.ld);
    const std::vector<bf16_t> src = ct::to_bf16(ct::random_values(rng, size_t(c.src_rows * c.ld)));
    std::vector<int32_t> rows(static_cast<size_t>(c.n));
    for (auto& r : rows) r = static_cast<int32_t>(rng() % c.src_rows);  // repeats allowed
    std::vector<bf16_t> want;
    for (int32_t r : rows) {
      want.insert(want.end(), src.begin() + r * c.ld, src.begin() + r * c.ld + c.cols);
    }
    auto d_src = ct::upload(src);
    auto d_rows = ct::upload(rows);
    DeviceBuffer<bf16_t> d_dst(size_t(c.n) * c.cols);
    d_dst.fill_bytes(0xFF);
    gather_rows(d_src.data(), c.ld, d_rows.data(), c.n, c.cols, d_dst.data(), nullptr);
    expect_same_bits(d_dst.download(), want, "gather_rows");
  }
}

// copy_rows: a strided row copy; the gaps of dst (between its rows) keep
// their poison bytes. 16-byte path (cols, lds multiples of 8) and element path.
TEST(CudaElementwise, CopyRowsIsExactAndLeavesTheGaps) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(21);
  struct Case {
    int32_t n, cols;
    int64_t ld_src, ld_dst;
  };
  for (const Case& c : {Case{1, 128, 384, 1024}, Case{5, 896, 1152, 21504}, Case{7, 100, 101, 250},
                        Case{33, 64, 64, 64}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " cols " << c.cols);
    const std::vector<bf16_t> src = ct::to_bf16(ct::random_values(rng, size_t(c.n * c.ld_src)));
    auto d_src = ct::upload(src);
    DeviceBuffer<bf16_t> d_dst(size_t(c.n) * c.ld_dst);
    d_dst.fill_bytes(0xFF);
    std::vector<bf16_t> want = d_dst.download();
    for (int32_t i = 0; i < c.n; ++i) {
      std::copy(src.begin() + i * c.ld_src, src.begin() + i * c.ld_src + c.cols,
                want.begin() + i * c.ld_dst);
    }
    copy_rows(d_src.data(), c.ld_src, c.n, c.cols, d_dst.data(), c.ld_dst, nullptr);
    expect_same_bits(d_dst.download(), want, "copy_rows");
  }
}

TEST(CudaElementwise, ScatterAddWeightedMatchesReference) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(20);
  struct Case {
    int32_t out_rows, n, cols;
  };
  for (const Case& c : {Case{8, 3, 16}, Case{64, 40, 1024}, Case{20, 20, 100}, Case{5, 2, 7}}) {
    SCOPED_TRACE(::testing::Message() << "cols " << c.cols << " n " << c.n);
    const std::vector<float> src = ct::random_values(rng, size_t(c.n) * c.cols);
    const std::vector<float> weights = ct::random_values(rng, size_t(c.n), 0.0f, 1.0f);
    std::vector<float> out = ct::random_values(rng, size_t(c.out_rows) * c.cols);
    std::vector<int32_t> rows(static_cast<size_t>(c.out_rows));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    rows.resize(static_cast<size_t>(c.n));  // distinct

    auto d_src = ct::upload(ct::to_bf16(src));
    auto d_rows = ct::upload(rows);
    auto d_weights = ct::upload(weights);
    auto d_out = ct::upload(out);
    scatter_add_weighted(d_src.data(), d_rows.data(), d_weights.data(), c.n, c.cols, d_out.data(),
                         nullptr);
    for (int32_t i = 0; i < c.n; ++i) {
      for (int32_t j = 0; j < c.cols; ++j) {
        out[size_t(rows[size_t(i)]) * c.cols + j] +=
            weights[size_t(i)] * src[size_t(i) * c.cols + j];
      }
    }
    // Only FMA contraction may differ: one rounding of a product.
    EXPECT_LE(ct::relative_error(d_out.download(), out), 1e-6);
  }
}

TEST(CudaElementwise, ConvertToBf16IsExact) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{100000}}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    // f32 values with full mantissas across magnitudes (rounding matters).
    std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-30, 30);
    std::vector<float> f32(static_cast<size_t>(n));
    for (auto& v : f32) v = std::ldexp(mantissa(rng), exponent(rng));
    f32[0] = 0.0f;
    std::vector<bf16_t> want(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      want[i] = from_bits(f32_to_bf16(f32[i]));
    }
    DeviceBuffer<bf16_t> d_dst(static_cast<size_t>(n));

    auto d_f32 = ct::upload(f32);
    d_dst.fill_bytes(0xFF);
    convert_to_bf16(d_f32.data(), 0, n, d_dst.data(), nullptr);
    expect_same_bits(d_dst.download(), want, "f32");

    auto d_bf16 = ct::upload(want);  // bf16 -> bf16 is a copy
    d_dst.fill_bytes(0xFF);
    convert_to_bf16(d_bf16.data(), 1, n, d_dst.data(), nullptr);
    expect_same_bits(d_dst.download(), want, "bf16");

    std::vector<__half> f16(f32.size());
    std::vector<bf16_t> want16(f32.size());
    for (size_t i = 0; i < f32.size(); ++i) {
      f16[i] = __float2half(std::ldexp(mantissa(rng), exponent(rng) / 3));
      want16[i] = from_bits(f32_to_bf16(__half2float(f16[i])));
    }
    auto d_f16 = ct::upload(f16);
    d_dst.fill_bytes(0xFF);
    convert_to_bf16(d_f16.data(), 2, n, d_dst.data(), nullptr);
    expect_same_bits(d_dst.download(), want16, "f16");
  }
}

// The CPU DummySource formula (model/weights.cpp), bf16 non-norm branch.
uint16_t dummy_bf16(uint64_t stream, int64_t i, float amplitude) {
  uint64_t z = stream + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float value = amplitude * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
  return f32_to_bf16(value);
}

TEST(CudaElementwise, FillDummyMatchesDummySourceBits) {
  SS_REQUIRE_GPU();
  std::mt19937_64 rng(22);
  const float amplitude = 0.02f * std::sqrt(3.0f);  // DummySource's
  for (int64_t n : {int64_t{1}, int64_t{1000003}}) {
    const uint64_t stream = rng();
    DeviceBuffer<bf16_t> d_dst(static_cast<size_t>(n));
    d_dst.fill_bytes(0xFF);
    fill_dummy_bf16(d_dst.data(), n, stream, amplitude, nullptr);
    const std::vector<bf16_t> got = d_dst.download();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(bits_of(got[size_t(i)]), dummy_bf16(stream, i, amplitude)) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace specstack::cuda

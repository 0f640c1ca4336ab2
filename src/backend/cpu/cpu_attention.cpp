// Paged attention on the CPU: K/V rows are written into their block slots and
// each query attends over its own sequence's slots [0, own slot] (causal by
// slot order, so sparse prefill works), optionally limited to a sliding
// window measured in positions.
//
// Two paths. A sequence with many query tokens in the step (prefill) is done
// as tiles of queries x gathered keys with sgemm (S = Q Kᵀ, softmax, O = P V).
// A sequence with few query tokens (decode) walks its slots directly, with
// the group of query heads sharing each K/V row load (GQA).
//
// The cache holds K/V as f32, bf16 or f16 (the layer tensors' dtype,
// --kv-dtype): rows are rounded to nearest even when written and widened to
// f32 as they are loaded (backend/cpu/kv_rows.h); all arithmetic is f32.
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_elementwise.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/op_timer.h"

namespace specstack {
namespace {

// Sequences with at least this many query tokens in a step take the GEMM path.
constexpr int64_t kGemmMinQueries = 8;
// Query tokens per GEMM tile: bounds the score matrix to tile*group x n_ctx.
constexpr int64_t kQueryTile = 32;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Flat slot index (block * block_size + offset) of a sequence's logical slot.
inline int64_t flat_slot(const AttentionBatch& batch, int64_t seq, int64_t slot,
                         int64_t block_size) {
  const auto& table = batch.block_tables[static_cast<size_t>(seq)];
  const int64_t logical_block = slot / block_size;
  SS_CHECK_LT(logical_block, static_cast<int64_t>(table.size()));
  return table[static_cast<size_t>(logical_block)] * block_size + slot % block_size;
}

inline bool visible(const AttentionParams& params, int32_t key_pos, int32_t query_pos) {
  return params.sliding_window <= 0 ||
         static_cast<int64_t>(key_pos) > static_cast<int64_t>(query_pos) - params.sliding_window;
}

struct AttentionContext {
  const Tensor& q;
  const AttentionBatch& batch;
  const KvLayerView& layer;
  const AttentionParams& params;
  Tensor& out;
  int64_t group;  // query heads per kv head
  cpu::KvRowCodec codec;
};

// One token, one kv head: walk the slots once for all heads of the group.
// The codec's fused loops widen each K/V value once for the whole group
// (f32 rows are read in place).
void attend_direct(const AttentionContext& c, int64_t t, int64_t g, std::vector<float>& scores,
                   std::vector<float>& acc) {
  const AttentionParams& p = c.params;
  const int64_t hd = p.head_dim;
  const int64_t kv_row = p.n_kv_heads * hd;
  const int64_t seq = c.batch.token_seq[static_cast<size_t>(t)];
  const int64_t n_visible = c.batch.token_slot[static_cast<size_t>(t)] + 1;
  SS_CHECK_LE(n_visible, c.batch.seq_n_slots[static_cast<size_t>(seq)]);
  const int32_t q_pos = c.batch.token_pos[static_cast<size_t>(t)];
  const float* q_rows = c.q.f32() + t * p.n_heads * hd + g * c.group * hd;
  const size_t elem = dtype_size(c.layer.k.dtype());
  const auto* k_store = static_cast<const uint8_t*>(c.layer.k.raw());
  const auto* v_store = static_cast<const uint8_t*>(c.layer.v.raw());
  const int32_t* positions = c.layer.positions.data<int32_t>();

  scores.assign(static_cast<size_t>(c.group * n_visible), kNegInf);
  for (int64_t s = 0; s < n_visible; ++s) {
    const int64_t flat = flat_slot(c.batch, seq, s, c.layer.block_size);
    if (!visible(p, positions[flat], q_pos)) continue;
    const uint8_t* k_row = k_store + static_cast<size_t>(flat * kv_row + g * hd) * elem;
    for (int64_t h = 0; h < c.group; h += cpu::kKvHeadsPerCall) {
      c.codec.dot_heads(q_rows + h * hd, std::min(cpu::kKvHeadsPerCall, c.group - h), hd, k_row,
                        p.scale, scores.data() + h * n_visible + s, n_visible);
    }
  }
  for (int64_t h = 0; h < c.group; ++h) cpu::softmax_row(scores.data() + h * n_visible, n_visible);
  acc.assign(static_cast<size_t>(c.group * hd), 0.0f);
  for (int64_t s = 0; s < n_visible; ++s) {
    bool any = false;
    for (int64_t h = 0; h < c.group; ++h)
      any |= scores[static_cast<size_t>(h * n_visible + s)] != 0.0f;
    if (!any) continue;  // masked or underflowed for every head: skip the row load
    const int64_t flat = flat_slot(c.batch, seq, s, c.layer.block_size);
    const uint8_t* v_row = v_store + static_cast<size_t>(flat * kv_row + g * hd) * elem;
    for (int64_t h = 0; h < c.group; h += cpu::kKvHeadsPerCall) {
      c.codec.axpy_heads(scores.data() + h * n_visible + s, n_visible,
                         std::min(cpu::kKvHeadsPerCall, c.group - h), v_row, hd,
                         acc.data() + h * hd);
    }
  }
  std::memcpy(c.out.f32() + t * p.n_heads * hd + g * c.group * hd, acc.data(),
              acc.size() * sizeof(float));
}

// Scratch of one GEMM task.
struct GemmScratch {
  std::vector<float> q;       // [m * group, head_dim]
  std::vector<float> k;       // [n_ctx, head_dim]
  std::vector<float> v;       // [n_ctx, head_dim]
  std::vector<int32_t> pos;   // [n_ctx]
  std::vector<float> scores;  // [m * group, n_ctx]
  std::vector<float> o;       // [m * group, head_dim]
};

// A tile of one sequence's query tokens against kv head g, via sgemm.
void attend_tile(const AttentionContext& c, int64_t seq, const int32_t* tokens, int64_t m,
                 int64_t g, GemmScratch& w) {
  const AttentionParams& p = c.params;
  const int64_t hd = p.head_dim;
  const int64_t kv_row = p.n_kv_heads * hd;
  const int64_t rows = m * c.group;
  int64_t n_ctx = 0;
  for (int64_t i = 0; i < m; ++i) {
    n_ctx = std::max<int64_t>(n_ctx, c.batch.token_slot[static_cast<size_t>(tokens[i])] + 1);
  }
  SS_CHECK_LE(n_ctx, c.batch.seq_n_slots[static_cast<size_t>(seq)]);

  w.k.resize(static_cast<size_t>(n_ctx * hd));
  w.v.resize(static_cast<size_t>(n_ctx * hd));
  w.pos.resize(static_cast<size_t>(n_ctx));
  const int32_t* positions = c.layer.positions.data<int32_t>();
  const size_t elem = dtype_size(c.layer.k.dtype());
  const auto* k_base = static_cast<const uint8_t*>(c.layer.k.raw());
  const auto* v_base = static_cast<const uint8_t*>(c.layer.v.raw());
  for (int64_t s = 0; s < n_ctx; ++s) {
    const int64_t flat = flat_slot(c.batch, seq, s, c.layer.block_size);
    const size_t offset = static_cast<size_t>(flat * kv_row + g * hd) * elem;
    c.codec.load(k_base + offset, hd, w.k.data() + s * hd);
    c.codec.load(v_base + offset, hd, w.v.data() + s * hd);
    w.pos[static_cast<size_t>(s)] = positions[flat];
  }
  w.q.resize(static_cast<size_t>(rows * hd));
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(w.q.data() + i * c.group * hd,
                c.q.f32() + tokens[i] * p.n_heads * hd + g * c.group * hd,
                c.group * hd * sizeof(float));
  }

  w.scores.resize(static_cast<size_t>(rows * n_ctx));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(n_ctx), static_cast<int>(hd), p.scale, w.q.data(),
              static_cast<int>(hd), w.k.data(), static_cast<int>(hd), 0.0f, w.scores.data(),
              static_cast<int>(n_ctx));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t n_visible = c.batch.token_slot[static_cast<size_t>(tokens[i])] + 1;
    const int32_t q_pos = c.batch.token_pos[static_cast<size_t>(tokens[i])];
    for (int64_t h = 0; h < c.group; ++h) {
      float* row = w.scores.data() + (i * c.group + h) * n_ctx;
      for (int64_t s = 0; s < n_ctx; ++s) {
        if (s >= n_visible || !visible(p, w.pos[static_cast<size_t>(s)], q_pos)) row[s] = kNegInf;
      }
      cpu::softmax_row(row, n_ctx);
    }
  }
  w.o.resize(static_cast<size_t>(rows * hd));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(hd), static_cast<int>(n_ctx), 1.0f, w.scores.data(),
              static_cast<int>(n_ctx), w.v.data(), static_cast<int>(hd), 0.0f, w.o.data(),
              static_cast<int>(hd));
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(c.out.f32() + tokens[i] * p.n_heads * hd + g * c.group * hd,
                w.o.data() + i * c.group * hd, c.group * hd * sizeof(float));
  }
}

}  // namespace

void CpuBackend::write_kv(const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                          KvLayerView& layer) {
  SS_PROFILE(kOpWriteKv);
  const int64_t n_tokens = static_cast<int64_t>(batch.token_seq.size());
  const int64_t row = layer.n_kv_heads * layer.head_dim;
  SS_CHECK_EQ(k.size(0), n_tokens);
  SS_CHECK_EQ(k.size(1), row);
  SS_CHECK_EQ(v.size(1), row);
  SS_CHECK(layer.k.dtype() == layer.v.dtype());
  const cpu::KvRowCodec codec = cpu::kv_row_codec(layer.k.dtype());
  const size_t row_bytes = dtype_bytes(layer.k.dtype(), row);
  auto* k_store = static_cast<uint8_t*>(layer.k.raw());
  auto* v_store = static_cast<uint8_t*>(layer.v.raw());
  int32_t* positions = layer.positions.data<int32_t>();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t flat = flat_slot(batch, batch.token_seq[static_cast<size_t>(t)],
                                   batch.token_slot[static_cast<size_t>(t)], layer.block_size);
    codec.store(k.f32() + t * row, row, k_store + static_cast<size_t>(flat) * row_bytes);
    codec.store(v.f32() + t * row, row, v_store + static_cast<size_t>(flat) * row_bytes);
    positions[flat] = batch.token_pos[static_cast<size_t>(t)];
  }
}

void CpuBackend::attention(const Tensor& q, const AttentionBatch& batch, const KvLayerView& layer,
                           const AttentionParams& params, Tensor& out) {
  SS_PROFILE(kOpAttention);
  const int64_t n_tokens = static_cast<int64_t>(batch.token_seq.size());
  SS_CHECK_EQ(q.size(0), n_tokens);
  SS_CHECK_EQ(q.size(1), params.n_heads * params.head_dim);
  SS_CHECK_EQ(params.n_heads % params.n_kv_heads, 0);
  SS_CHECK(layer.k.dtype() == layer.v.dtype());
  const AttentionContext context{q,
                                 batch,
                                 layer,
                                 params,
                                 out,
                                 params.n_heads / params.n_kv_heads,
                                 cpu::kv_row_codec(layer.k.dtype())};

  // Split tokens: GEMM tiles for sequences with many queries, direct for the rest.
  std::vector<std::vector<int32_t>> by_seq(batch.block_tables.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    by_seq[static_cast<size_t>(batch.token_seq[static_cast<size_t>(t)])].push_back(
        static_cast<int32_t>(t));
  }
  struct Task {
    int64_t seq;
    int64_t first;  // index into by_seq[seq]
    int64_t count;  // 1 token (direct) or a tile
    int64_t g;
    bool gemm;
  };
  std::vector<Task> tasks;
  for (size_t s = 0; s < by_seq.size(); ++s) {
    const auto n_q = static_cast<int64_t>(by_seq[s].size());
    const bool gemm = n_q >= kGemmMinQueries;
    const int64_t step = gemm ? kQueryTile : 1;
    for (int64_t first = 0; first < n_q; first += step) {
      for (int64_t g = 0; g < params.n_kv_heads; ++g) {
        tasks.push_back({static_cast<int64_t>(s), first, std::min(step, n_q - first), g, gemm});
      }
    }
  }
  // Tile costs grow with their context, so tasks are handed out dynamically.
  std::atomic<int64_t> next{0};
  const auto n_tasks = static_cast<int64_t>(tasks.size());
  pool_.parallel_for(std::min<int64_t>(n_tasks, pool_.n_threads()), 1, [&](int64_t, int64_t) {
    std::vector<float> scores, acc;
    GemmScratch scratch;
    for (int64_t i = next.fetch_add(1); i < n_tasks; i = next.fetch_add(1)) {
      const Task& task = tasks[static_cast<size_t>(i)];
      const int32_t* tokens = by_seq[static_cast<size_t>(task.seq)].data() + task.first;
      if (task.gemm) {
        attend_tile(context, task.seq, tokens, task.count, task.g, scratch);
      } else {
        attend_direct(context, tokens[0], task.g, scores, acc);
      }
    }
  });
}

}  // namespace specstack

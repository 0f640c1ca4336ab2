// CudaModel::forward: stage the step's metadata in one transfer, run the
// layers, copy the wanted logits back. Decode-shaped steps go through a
// captured graph when one fits (cuda_graphs.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda/attention.h"
#include "cuda/cuda_model_internal.h"
#include "cuda/elementwise.h"
#include "cuda/flash_attention.h"
#include "cuda/flash_attention_fp8.h"
#include "cuda/norm_quantize_fp8.h"
#include "cuda/qkv_rope_gemv.h"
#include "cuda/rope_kv.h"
#include "cuda/row_scatter.h"
#include "cuda/sampling.h"
#include "cuda/verify_attention.h"

namespace specstack::cuda {

namespace {

// Chunks at least this long use the flash kernel; shorter ones (and decode
// tokens) the paged kernel, whose per-query cost is lower for few rows.
constexpr int32_t kFlashMinRows = 16;
// Every paged row goes through the run kernel when it is on, decode rows as
// runs of one, graph steps included: the FA2-style kernel is faster at every
// point measured (H100, bench/attention_bench, one qwen2.5-7b layer, us,
// per-token -> run kernel): decode 1 x 1K 18.4 -> 11.5, 8 x 1K 29.2 -> 12.9,
// 1 x 8K 34.3 -> 17.6, 32 x 16K 842 -> 411; 5-row verify runs 1 x 1K 21.0 ->
// 20.9, 1 x 8K 89.8 -> 28.2, 32 x 16K 3357 -> 504. (The version before it
// lost to the per-token kernel below 16 rows.)

// FP8 linears from this many rows (prefill chunks) take their input as e4m3
// straight from the norm and fold the QKV scales into the rope kernel. Below
// it (decode batches) the separate passes stay: in the H100 call that fused
// at every row count, decode batch 8 came out 3-6% slower than main's binary
// (qwen2.5-7b / llama-3.1-8b, docs/benchmarks.md "session 24"), and the rope
// kernel runs one CTA per token, so few rows leave it latency-bound.
constexpr int32_t kFp8FuseMinRows = 256;

// The split-K setup of an eager step's paged attention: n_tokens queries in
// n_runs runs (runs: the run kernel is on and the runs are staged) at
// contexts up to max_context. The step's paged rows and a tail layer's logit
// row alone (StepMeta::tail_rows_only: one query, one run) both take it.
struct PagedSplit {
  int32_t partition = kPartitionSize;  // the per-token kernel's partition
  int32_t run_split = 0;               // the run kernel's run-time split (0: none)
  int32_t grid_parts = 0;              // the run kernel's CTAs along partitions
};
PagedSplit eager_paged_split(int32_t n_tokens, int32_t n_runs, bool runs, int64_t n_kv_heads,
                             int32_t max_context) {
  const auto kv_heads = static_cast<int32_t>(n_kv_heads);
  PagedSplit split;
  split.partition = paged_attention_partition_size(n_tokens, kv_heads);
  if (runs) {
    split.run_split = run_attention_split(n_runs, kv_heads, max_context);
    // The step's contexts are known: about one wave of CTAs, each
    // accumulating its share of the partitions (run_attention_eager_grid_parts).
    split.grid_parts = run_attention_eager_grid_parts(n_runs, kv_heads);
  }
  return split;
}

// Appends sections to the staged int32 buffer and remembers their offsets.
struct Stager {
  std::vector<int32_t>& data;
  size_t add(size_t count, int32_t fill = 0) {
    const size_t offset = data.size();
    data.resize(offset + count, fill);
    return offset;
  }
};

}  // namespace

void grow_pinned(void** ptr, size_t* capacity, size_t bytes) {
  if (bytes <= *capacity) return;
  if (*ptr != nullptr) SS_CUDA_CHECK(cudaFreeHost(*ptr));
  const size_t grown = std::max(bytes, *capacity * 2);
  SS_CUDA_CHECK(cudaMallocHost(ptr, grown));
  *capacity = grown;
}

MetaOffsets plan_step(const ForwardBatch& batch, int64_t block_size, bool flash_ok,
                      int32_t run_group, int32_t graph_batch, int32_t graph_max_blocks,
                      int32_t graph_max_context, CudaModel::StepMeta& meta,
                      std::vector<int32_t>& staged) {
  const auto& att = batch.attention;
  const auto n = static_cast<int32_t>(batch.token_ids.size());
  const auto n_seqs = static_cast<int32_t>(att.block_tables.size());
  const bool graph = graph_batch > 0;
  meta = CudaModel::StepMeta();
  meta.n_tokens = graph ? graph_batch : n;
  meta.n_seqs = graph ? graph_batch : n_seqs;
  int32_t max_blocks = 1;
  for (const auto& table : att.block_tables) {
    max_blocks = std::max(max_blocks, static_cast<int32_t>(table.size()));
  }
  if (graph) max_blocks = graph_max_blocks;
  meta.max_blocks = max_blocks;

  staged.clear();
  Stager s{staged};
  MetaOffsets o{};
  o.ids = s.add(size_t(meta.n_tokens));
  o.pos = s.add(size_t(meta.n_tokens));
  o.slot_mapping = s.add(size_t(meta.n_tokens), -1);
  o.token_slot = s.add(size_t(meta.n_tokens));
  o.block_tables = s.add(size_t(meta.n_seqs) * size_t(max_blocks));
  for (int32_t t = 0; t < n; ++t) {
    const int32_t seq = att.token_seq[size_t(t)];
    const int32_t slot = att.token_slot[size_t(t)];
    const auto& table = att.block_tables[size_t(seq)];
    staged[o.ids + t] = batch.token_ids[size_t(t)];
    staged[o.pos + t] = att.token_pos[size_t(t)];
    staged[o.slot_mapping + t] =
        table[size_t(slot / block_size)] * static_cast<int32_t>(block_size) +
        static_cast<int32_t>(slot % block_size);
    staged[o.token_slot + t] = slot;
  }
  for (int32_t q = 0; q < n_seqs; ++q) {
    const auto& table = att.block_tables[size_t(q)];
    std::copy(table.begin(), table.end(), staged.begin() + o.block_tables + size_t(q) * max_blocks);
  }

  // Logit rows: the graph computes every row (padding rows are ignored).
  meta.n_logit_rows = graph ? graph_batch : static_cast<int32_t>(batch.logit_rows.size());
  o.logit_rows = s.add(size_t(meta.n_logit_rows));
  for (int32_t i = 0; i < meta.n_logit_rows; ++i) {
    staged[o.logit_rows + i] = graph ? i : batch.logit_rows[size_t(i)];
  }

  // Flash jobs: runs of >= kFlashMinRows consecutive rows of one sequence
  // with ascending slots. Everything else is paged.
  std::vector<int32_t> paged;
  int32_t t = 0;
  while (t < n) {
    int32_t end = t + 1;
    while (end < n && att.token_seq[size_t(end)] == att.token_seq[size_t(t)] &&
           att.token_slot[size_t(end)] > att.token_slot[size_t(end - 1)]) {
      ++end;
    }
    if (!graph && flash_ok && end - t >= kFlashMinRows) {
      meta.flash.push_back(
          FlashJob{t, end - t, att.token_seq[size_t(t)], att.token_slot[size_t(end - 1)] + 1});
    } else {
      for (int32_t r = t; r < end; ++r) paged.push_back(r);
    }
    t = end;
  }
  if (graph) {
    paged.clear();
    for (int32_t r = 0; r < graph_batch; ++r) paged.push_back(r);
  }
  if (!meta.flash.empty()) {
    o.flash_seq = s.add(meta.flash.size());
    for (size_t j = 0; j < meta.flash.size(); ++j) staged[o.flash_seq + j] = meta.flash[j].seq;
    o.one_run = s.add(2);
    staged[o.one_run] = 1;  // token_run: a run of one row; run_first: row 0
  }
  meta.tail_rows_only = !graph && meta.n_logit_rows < n;
  if (meta.tail_rows_only) {
    std::vector<char> wants_logits(size_t(n), 0);
    for (const int32_t r : batch.logit_rows) wants_logits[size_t(r)] = 1;
    for (FlashJob& job : meta.flash) {
      const auto first = wants_logits.begin() + job.row0;
      const auto count = std::count(first, first + job.n_rows, char{1});
      job.last_row_logits = wants_logits[size_t(job.row0 + job.n_rows - 1)] != 0;
      if (count > (job.last_row_logits ? 1 : 0)) meta.tail_rows_only = false;
    }
  }
  meta.n_paged = static_cast<int32_t>(paged.size());
  const bool contiguous = !paged.empty() && paged.back() - paged.front() + 1 == meta.n_paged;
  meta.paged_begin = contiguous ? paged.front() : -1;
  o.paged_rows = s.add(paged.size());
  o.paged_seq = s.add(paged.size());
  o.paged_slot = s.add(paged.size());
  o.paged_pos = s.add(paged.size());
  int32_t max_context = 0;
  for (size_t i = 0; i < paged.size(); ++i) {
    const int32_t r = paged[i];
    staged[o.paged_rows + i] = r;
    if (r < n) {
      staged[o.paged_seq + i] = att.token_seq[size_t(r)];
      staged[o.paged_slot + i] = att.token_slot[size_t(r)];
      staged[o.paged_pos + i] = att.token_pos[size_t(r)];
      max_context = std::max(max_context, att.token_slot[size_t(r)] + 1);
    } else {  // graph padding: its own empty sequence row, slot 0
      staged[o.paged_seq + i] = r;
    }
  }
  meta.paged_max_context = graph ? graph_max_context : max_context;
  // Graph steps stage runs at capture and at replay alike (the section's
  // presence depends only on run_group), so the layouts match.
  if (run_group > 0 && !paged.empty()) {
    std::vector<int32_t> run(paged.size());
    paged_attention_runs(staged.data() + o.paged_seq, staged.data() + o.paged_slot,
                         static_cast<int32_t>(paged.size()), run_group, run.data());
    o.paged_run = s.add(paged.size());
    std::copy(run.begin(), run.end(), staged.begin() + o.paged_run);
    o.n_runs = static_cast<int32_t>(
        std::count_if(run.begin(), run.end(), [](int32_t r) { return r > 0; }));
    if (!graph) {  // a graph's grid is fixed at capture: it keeps one CTA row per token
      o.paged_run_first = s.add(size_t(o.n_runs));
      size_t next = o.paged_run_first;
      for (size_t t = 0; t < run.size(); ++t) {
        if (run[t] > 0) staged[next++] = static_cast<int32_t>(t);
      }
    }
  }
  meta.capture_rows.assign(batch.capture_rows.begin(), batch.capture_rows.end());
  return o;
}

void set_device_pointers(const MetaOffsets& o, int32_t* base, CudaModel::StepMeta& meta) {
  meta.ids = base + o.ids;
  meta.pos = base + o.pos;
  meta.slot_mapping = base + o.slot_mapping;
  meta.token_slot = base + o.token_slot;
  meta.block_tables = base + o.block_tables;
  meta.logit_rows = base + o.logit_rows;
  meta.paged_rows = base + o.paged_rows;
  meta.paged_seq = base + o.paged_seq;
  meta.paged_slot = base + o.paged_slot;
  meta.paged_pos = base + o.paged_pos;
  meta.paged_run = o.paged_run > 0 ? base + o.paged_run : nullptr;
  meta.paged_n_runs = o.paged_run > 0 ? o.n_runs : 0;
  meta.paged_run_first = o.paged_run_first > 0 ? base + o.paged_run_first : nullptr;
  meta.flash_seq = o.flash_seq > 0 ? base + o.flash_seq : nullptr;
  meta.one_run = o.one_run > 0 ? base + o.one_run : nullptr;
}

void CudaModel::forward(const ForwardBatch& batch, KvCache& kv_base, Tensor& logits) {
  auto* kv = dynamic_cast<CudaKvCache*>(&kv_base);
  SS_CHECK_MSG(kv != nullptr, "CudaModel needs a CudaKvCache");
  const auto n = static_cast<int64_t>(batch.token_ids.size());
  SS_CHECK_GT(n, 0);
  const int64_t vocab = config_.vocab_size;
  const int64_t q_width = config_.n_heads * config_.head_dim;
  if (batch.captured_queries != nullptr) {
    *batch.captured_queries = Tensor::zeros(
        DType::kF32, {static_cast<int64_t>(batch.capture_rows.size()), config_.n_layers, q_width});
  }
  prepare_one_launch(*kv);  // before any replay: its layer table names this cache's layers
  if (try_graph_forward(batch, *kv, logits)) return;

  ensure_scratch(n);
  StepMeta& meta = *meta_;
  std::vector<int32_t> staged;
  const MetaOffsets offsets =
      plan_step(batch, kv->shape().block_size, flash_attention_supported(config_.head_dim),
                run_group(), 0, 0, 0, meta, staged);
  // An MoE last layer adds into x_ itself (moe_mlp), so it keeps every row.
  meta.tail_rows_only =
      meta.tail_rows_only && tail_rows_only_ && !config_.layer_is_moe(config_.n_layers - 1);
  tail_steps_ += meta.tail_rows_only;
  grow_pinned(reinterpret_cast<void**>(&meta_host_), &meta_host_capacity_,
              staged.size() * sizeof(int32_t));
  std::memcpy(meta_host_, staged.data(), staged.size() * sizeof(int32_t));
  meta_device_.reserve(staged.size());
  SS_CUDA_CHECK(cudaMemcpyAsync(meta_device_.data(), meta_host_, staged.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  set_device_pointers(offsets, meta_device_.data(), meta);
  size_t workspace_floats = 0;  // paged attention's split-K partials, the tail rows' included
  if (meta.n_paged > 0) {
    const PagedSplit split =
        eager_paged_split(meta.n_paged, meta.paged_n_runs, meta.paged_run != nullptr,
                          config_.n_kv_heads, meta.paged_max_context);
    meta.paged_partition = split.partition;
    meta.paged_run_split = split.run_split;
    meta.paged_run_grid_parts = split.grid_parts;
    workspace_floats = paged_attention_workspace_floats(
        meta.n_paged, static_cast<int32_t>(config_.n_heads), static_cast<int32_t>(config_.head_dim),
        meta.paged_max_context, meta.paged_partition, meta.paged_run_split);
    if (meta.paged_begin < 0) {
      compact_q_.reserve(size_t(meta.n_paged) * q_width);
      compact_out_.reserve(size_t(meta.n_paged) * q_width);
    }
  }
  if (meta.tail_rows_only) {
    for (const FlashJob& job : meta.flash) {
      if (!job.last_row_logits) continue;
      const PagedSplit split =
          eager_paged_split(1, 1, run_group() > 0, config_.n_kv_heads, job.n_keys);
      workspace_floats =
          std::max(workspace_floats,
                   paged_attention_workspace_floats(1, static_cast<int32_t>(config_.n_heads),
                                                    static_cast<int32_t>(config_.head_dim),
                                                    job.n_keys, split.partition, split.run_split));
    }
  }
  attn_workspace_.reserve(workspace_floats);
  meta.attn_workspace = attn_workspace_.data();
  const size_t capture_count = meta.capture_rows.size() * config_.n_layers * q_width;
  grow_pinned(reinterpret_cast<void**>(&capture_host_), &capture_host_capacity_,
              capture_count * sizeof(bf16));
  if (static_cast<size_t>(meta.n_logit_rows) * vocab > logits_.size()) {
    graphs_.clear();  // reallocating buffers the graphs point at
    capture_graphs_.clear();
    logits_.reserve(size_t(meta.n_logit_rows) * vocab);
    head_in_.reserve(size_t(meta.n_logit_rows) * config_.hidden_size);
  }
  if (meta.tail_rows_only) {
    tail_x_.reserve(size_t(meta.n_logit_rows) * config_.hidden_size);
    tail_attn_.reserve(size_t(meta.n_logit_rows) * q_width);
  }

  run_layers(meta, *kv, /*graph_safe=*/false);
  finish_step(batch, meta.n_logit_rows, logits);
  if (batch.captured_queries != nullptr) {
    captured_to_f32(capture_host_, capture_count, batch.captured_queries->f32());
  }
}

void CudaModel::run_layers(const StepMeta& meta, CudaKvCache& kv, bool graph_safe) {
  if (one_launch_applies(meta)) {  // a batch-1 decode step's layers in one launch
    run_one_launch(meta, kv);
    lm_head(meta, /*rows_gathered=*/false);
    return;
  }
  const ModelConfig& c = config_;
  const auto n = meta.n_tokens;
  const auto hidden = static_cast<int32_t>(c.hidden_size);
  const float eps = static_cast<float>(c.rms_norm_eps);
  embedding(embed_, meta.ids, n, hidden, x_.data(), stream_);
  // The residual stream [rows, hidden] f32 the blocks read and add into: x_
  // for the step's rows, then in the last layer of a tail_rows_only step the
  // logit rows alone, gathered into tail_x_ after attention (rows =
  // n_logit_rows, in logit order, so the LM head reads h_ as it is).
  float* resid = x_.data();
  int32_t rows = n;
  const bf16* pending = nullptr;  // a block output not yet added to the residual
  // --quantization fp8 past the GEMV rows: a norm whose next linear is an
  // FP8 GEMM writes its rows as e4m3 with their per-token scales (h8), not
  // as bf16 into h_, so that GEMM needs no quantize pass of its own.
  Fp8Rows h8;
  // pending's scales when the FP8 GEMM that wrote it left them to the next
  // norm (the o and down projections at prefill rows: unscaled GEMMs are
  // 10-15% faster than cuBLASLt's outer-vector scaled ones there).
  Fp8Scales pending_scales;
  auto norm = [&](const float* weight, const LinearWeight* next) {
    const bool to_fp8 = next != nullptr && rows >= kFp8FuseMinRows &&
                        gemm_->fp8_gemm_path(*next, rows, hidden) &&
                        norm_quantize_fp8_supported(resid, weight, hidden);
    h8 = to_fp8 ? gemm_->fp8_input(rows, hidden) : Fp8Rows{};
    if (pending != nullptr) {
      if (to_fp8) {
        add_rmsnorm_quantize_fp8(resid, pending, pending_scales, weight, eps, rows, hidden, h8.q,
                                 h8.scale, stream_);
      } else {
        if (pending_scales.col != nullptr) {  // pending is delta_, not yet scaled
          scale_outer_bf16(delta_.data(), hidden, rows, hidden, pending_scales.row,
                           pending_scales.col, nullptr, stream_);
        }
        add_rmsnorm(resid, pending, weight, eps, rows, hidden, h_.data(), stream_);
      }
    } else if (to_fp8) {
      rmsnorm_quantize_fp8(resid, weight, eps, rows, hidden, h8.q, h8.scale, stream_);
    } else {
      rmsnorm(resid, nullptr, weight, eps, rows, hidden, h_.data(), stream_);
    }
    pending = nullptr;
    pending_scales = {};
    return to_fp8;
  };
  // The last layer's outputs count for the logit rows alone (its K/V are
  // written for every row inside attention): 1 / n_layers of a long prefill.
  // plan_step never marks a graph step so.
  const bool tail = meta.tail_rows_only;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const DeviceLayer& layer = layers_[size_t(l)];
    const bool tail_layer = tail && l == c.n_layers - 1;
    const bool attn_fp8 = norm(layer.attn_norm, &layer.qkv);
    pending_scales = attention(l, meta, kv, graph_safe, attn_fp8 ? &h8 : nullptr, tail_layer);
    pending = delta_.data();
    if (tail_layer) {
      if (meta.n_logit_rows == 0) return;  // a prefill chunk before the last: K/V was all
      // f32 rows copied bit for bit as pairs of bf16 (gather_rows copies bits).
      gather_rows(reinterpret_cast<const bf16*>(x_.data()), 2 * int64_t{hidden}, meta.logit_rows,
                  meta.n_logit_rows, 2 * hidden, reinterpret_cast<bf16*>(tail_x_.data()), stream_);
      resid = tail_x_.data();
      rows = meta.n_logit_rows;
    }
    if (c.layer_is_moe(l)) {
      norm(layer.ffn_norm, nullptr);
      SS_CHECK(!graph_safe);
      moe_mlp(layer, n);  // adds into the residual itself
    } else {
      const int64_t inter = c.intermediate_size;
      // mlp's Fp8Rows form needs both projections in FP8.
      const bool mlp_fp8 =
          norm(layer.ffn_norm, layer.down.w8 != nullptr ? &layer.gate_up : nullptr);
      SS_CHECK(rows <= gate_up_rows_ || gemm_->gate_up_fused(h_.data(), hidden, layer.gate_up, rows,
                                                             inter, hidden, act_.data()));
      if (mlp_fp8) {
        gemm_->mlp(h8, layer.gate_up, layer.down, rows, inter, hidden, gate_up_.data(), act_.data(),
                   delta_.data(), hidden, &pending_scales);
      } else {
        gemm_->mlp(h_.data(), hidden, layer.gate_up, layer.down, rows, inter, hidden,
                   gate_up_.data(), act_.data(), delta_.data(), hidden);
      }
      pending = delta_.data();
    }
  }
  norm(final_norm_, nullptr);
  lm_head(meta, /*rows_gathered=*/tail);  // the tail's rows are the logit rows already
}

void CudaModel::lm_head(const StepMeta& meta, bool rows_gathered) {
  if (meta.n_logit_rows == 0) return;
  const ModelConfig& c = config_;
  const auto hidden = static_cast<int32_t>(c.hidden_size);
  const bf16* head_in = h_.data();
  if (!rows_gathered) {
    gather_rows(h_.data(), hidden, meta.logit_rows, meta.n_logit_rows, hidden, head_in_.data(),
                stream_);
    head_in = head_in_.data();
  }
  gemm_->linear_f32(head_in, hidden, lm_head_, meta.n_logit_rows, c.vocab_size, hidden,
                    logits_.data(), c.vocab_size);
}

Fp8Scales CudaModel::attention(int64_t l, const StepMeta& meta, CudaKvCache& kv, bool graph_safe,
                               const Fp8Rows* x8, bool tail) {
  const ModelConfig& c = config_;
  const DeviceLayer& layer = layers_[size_t(l)];
  const auto n = meta.n_tokens;
  const auto hidden = static_cast<int32_t>(c.hidden_size);
  const auto n_heads = static_cast<int32_t>(c.n_heads);
  const auto n_kv_heads = static_cast<int32_t>(c.n_kv_heads);
  const auto head_dim = static_cast<int32_t>(c.head_dim);
  const int64_t q_width = int64_t(n_heads) * head_dim;
  const int64_t kv_width = int64_t(n_kv_heads) * head_dim;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(c.rms_norm_eps);
  bf16* qkv = qkv_.data();  // [n, qkv_width]: q | k | v per row
  // A bias the GEMM would add in a launch of its own goes into the rope
  // kernel instead (bit-identical; one launch less per layer: ~3 us each at
  // 64 rows on the H100). q/k norms come between bias and rope, so not then.
  const bool bias_in_rope = layer.qkv_bias != nullptr && layer.q_norm == nullptr &&
                            !Gemm::fuses_bias(h_.data(), hidden, layer.qkv, n, hidden);
  // Batch-1 decode with bf16 weights: the projection, RoPE and the KV write
  // in one kernel (qkv_rope_gemv.h; q/k norms sit between them, so not with
  // those). H100, same call (docs/benchmarks.md "session 30"): qwen2.5-0.5b
  // batch 1 +2.5% / +1.2% at 512 / 8K, SpecPrefill's lookahead 7.4 -> 7.0 ms,
  // qwen2.5-7b / llama-3.1-8b bf16 +0.2%; with e4m3 weights -0.1 to -0.4%
  // (the FP8 qkv GEMV is a few us, and rope had little left on the chain
  // once its angles were computed before its wait), so FP8 keeps two launches.
  QkvRopeArgs fused;
  if (n == 1 && x8 == nullptr && layer.q_norm == nullptr && layer.qkv.w8 == nullptr &&
      gemm_->gemv_path(h_.data(), hidden, layer.qkv, n, hidden)) {
    fused.x = h_.data();
    fused.w16 = layer.qkv.w16;
    fused.bias = layer.qkv_bias;
    fused.in = hidden;
    fused.n_heads = n_heads;
    fused.n_kv_heads = n_kv_heads;
    fused.head_dim = head_dim;
    fused.position = meta.pos;
    fused.inv_freq = inv_freq_;
    fused.slot = meta.slot_mapping;
    fused.qkv = qkv;
    fused.k_cache = kv.k(l);
    fused.v_cache = kv.v(l);
    fused.slot_positions = kv.slot_positions();
  }
  const bool rope_in_gemv = fused.x != nullptr && qkv_rope_gemv_supported(fused);
  QkvEpilogue epilogue;
  if (rope_in_gemv) {
    qkv_rope_gemv(fused, stream_);
  } else if (x8 == nullptr) {
    gemm_->linear(h_.data(), hidden, layer.qkv, n, qkv_width, hidden, qkv, qkv_width,
                  bias_in_rope ? nullptr : layer.qkv_bias);
    if (bias_in_rope) epilogue.bias = layer.qkv_bias;
  } else if (layer.q_norm == nullptr) {
    // FP8 GEMM unscaled; its scales and the bias ride in the rope kernel
    // (bit-identical to scale_outer_bf16 then rope: fp8_device.cuh), which
    // saves a pass over [n, qkv_width] (64 us a layer at 8K on qwen2.5-7b).
    const Fp8Scales s =
        gemm_->linear_unscaled(*x8, layer.qkv, n, qkv_width, hidden, qkv, qkv_width);
    epilogue.row_scale = s.row;
    epilogue.col_scale = s.col;
    epilogue.bias = layer.qkv_bias;
  } else {  // q/k norms come between the scales and rope
    gemm_->linear(*x8, layer.qkv, n, qkv_width, hidden, qkv, qkv_width, layer.qkv_bias);
  }
  if (layer.q_norm != nullptr) {
    head_rmsnorm(qkv, n, qkv_width, n_heads, head_dim, layer.q_norm, eps, stream_);
    head_rmsnorm(qkv + q_width, n, qkv_width, n_kv_heads, head_dim, layer.k_norm, eps, stream_);
  }
  // k's heads follow q's in each row: one launch rotates both and stores k
  // and v in their paged slots.
  if (!rope_in_gemv) {
    rope_write_kv(qkv, n, qkv_width, n_heads, n_kv_heads, head_dim, meta.pos, inv_freq_,
                  meta.slot_mapping, kv.k(l), kv.v(l), kv.slot_positions(), epilogue, stream_);
  }
  if (meta.capture_device != nullptr) {  // a capture graph: every row, device to device
    // A kernel, not a memcpy node: attention keeps its programmatic edge.
    copy_rows(qkv, qkv_width, n, static_cast<int32_t>(q_width), meta.capture_device + l * q_width,
              c.n_layers * q_width, stream_);
  }
  for (size_t i = 0; i < meta.capture_rows.size(); ++i) {
    SS_CHECK(!graph_safe);
    bf16* dst = capture_host_ + (i * size_t(c.n_layers) + size_t(l)) * size_t(q_width);
    SS_CUDA_CHECK(cudaMemcpyAsync(dst, qkv + int64_t(meta.capture_rows[i]) * qkv_width,
                                  q_width * sizeof(bf16), cudaMemcpyDeviceToHost, stream_));
  }

  // A tail with no logit rows (a prefill chunk before the last): the K/V
  // above is all the last layer owes.
  if (tail && meta.n_logit_rows == 0) return {};

  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int32_t window = c.layer_is_sliding(l) ? static_cast<int32_t>(c.sliding_window) : 0;
  const int32_t block_size = static_cast<int32_t>(kv.shape().block_size);
  bf16* attn = attn_.data();  // [n, q_width]
  // Eager query capture copies (to the host) sit between the KV write and
  // attention: the next kernel cannot launch programmatically after a copy
  // (cuda/pdl.h). A capture graph copies with a kernel (copy_rows).
  const bool after_copy = !meta.capture_rows.empty();
  // The layer's paged-attention fields (the tail rows' and the paged rows' calls).
  PagedAttentionArgs paged_layer;
  paged_layer.k_cache = kv.k(l);
  paged_layer.v_cache = kv.v(l);
  paged_layer.slot_positions = kv.slot_positions();
  paged_layer.block_tables = meta.block_tables;
  paged_layer.max_blocks_per_seq = meta.max_blocks;
  paged_layer.n_heads = n_heads;
  paged_layer.n_kv_heads = n_kv_heads;
  paged_layer.head_dim = head_dim;
  paged_layer.block_size = block_size;
  paged_layer.scale = scale;
  paged_layer.sliding_window = window;
  paged_layer.out_stride = q_width;
  paged_layer.workspace = meta.attn_workspace;
  for (size_t j = 0; j < meta.flash.size(); ++j) {
    const FlashJob& job = meta.flash[j];
    if (tail) {
      // The tail: a job's last row alone, if it wants logits
      // (tail_rows_only), on the split-K paged kernel. The flash kernel
      // would give that one row one CTA per head walking every key tile:
      // H100, 8K keys, 0.24 ms (qwen2.5-0.5b) / 0.28 ms (qwen2.5-7b), as long
      // as the whole layer's heaviest CTA (docs/benchmarks.md "session 42").
      if (!job.last_row_logits) continue;
      const int32_t row = job.row0 + job.n_rows - 1;
      PagedAttentionArgs a = paged_layer;
      a.q = qkv + int64_t(row) * qkv_width;
      a.q_stride = qkv_width;
      a.token_seq = meta.flash_seq + j;
      a.token_slot = meta.token_slot + row;
      a.token_pos = meta.pos + row;
      a.n_tokens = 1;
      a.max_context = job.n_keys;
      const PagedSplit split = eager_paged_split(1, 1, run_group() > 0, c.n_kv_heads, job.n_keys);
      a.partition_size = split.partition;
      if (run_group() > 0) {  // as plan_step stages runs for paged rows
        a.token_run = meta.one_run;
        a.n_runs = 1;
        a.run_first = meta.one_run + 1;
        a.run_split = split.run_split;
        a.run_grid_parts = split.grid_parts;
      }
      a.out = attn + int64_t(row) * q_width;
      a.pdl = !after_copy;
      paged_attention(a, stream_);
      continue;
    }
    FlashAttentionArgs a;
    a.q = qkv + int64_t(job.row0) * qkv_width;
    a.q_stride = qkv_width;
    a.q_slot = meta.token_slot + job.row0;
    a.q_pos = meta.pos + job.row0;
    a.n_rows = job.n_rows;
    a.k_cache = kv.k(l);
    a.v_cache = kv.v(l);
    a.slot_positions = kv.slot_positions();
    a.block_table = meta.block_tables + int64_t(job.seq) * meta.max_blocks;
    a.block_size = block_size;
    a.n_keys = job.n_keys;
    a.n_heads = n_heads;
    a.n_kv_heads = n_kv_heads;
    a.head_dim = head_dim;
    a.scale = scale;
    a.sliding_window = window;
    a.out = attn + int64_t(job.row0) * q_width;
    a.out_stride = q_width;
    if (options_.fp8_attention && flash_attention_fp8_supported(a) &&
        (fp8_attention_all_ || a.n_keys >= flash_attention_fp8_min_keys(head_dim))) {
      // Grows once to the largest job (cudaFree waits for the device).
      const size_t bytes = flash_attention_fp8_workspace_bytes(a);
      fp8_attention_workspace_.reserve(bytes);
      flash_attention_fp8(a, fp8_attention_workspace_.data(), bytes, stream_);
      ++fp8_attention_jobs_;
    } else {
      flash_attention(a, stream_);
    }
  }
  if (meta.n_paged > 0) {
    const bool compact = meta.paged_begin < 0;
    SS_CHECK(!(compact && graph_safe));
    PagedAttentionArgs a = paged_layer;
    if (compact) {
      gather_rows(qkv, qkv_width, meta.paged_rows, meta.n_paged, static_cast<int32_t>(q_width),
                  compact_q_.data(), stream_, /*pdl=*/!after_copy);
      a.q = compact_q_.data();
      a.q_stride = q_width;
      a.out = compact_out_.data();
    } else {
      a.q = qkv + int64_t(meta.paged_begin) * qkv_width;
      a.q_stride = qkv_width;
      a.out = attn + int64_t(meta.paged_begin) * q_width;
    }
    a.token_seq = meta.paged_seq;
    a.token_slot = meta.paged_slot;
    a.token_pos = meta.paged_pos;
    a.token_run = meta.paged_run;
    a.n_runs = meta.paged_n_runs;
    a.run_first = meta.paged_run_first;
    a.run_partition_size = meta.paged_run_partition;
    a.run_grid_parts = meta.paged_run_grid_parts;
    a.run_split = meta.paged_run_split;
    a.n_tokens = meta.n_paged;
    a.max_context = meta.paged_max_context;
    a.partition_size = meta.paged_partition;
    a.pdl = compact || !after_copy;
    paged_attention(a, stream_);
    if (compact) {
      scatter_rows(compact_out_.data(), meta.paged_rows, meta.n_paged,
                   static_cast<int32_t>(q_width), attn, q_width, stream_);
    }
  }
  if (tail) {  // o for the logit rows alone, into delta_'s first rows (run_layers)
    gather_rows(attn, q_width, meta.logit_rows, meta.n_logit_rows, static_cast<int32_t>(q_width),
                tail_attn_.data(), stream_);
    gemm_->linear(tail_attn_.data(), q_width, layer.o, meta.n_logit_rows, hidden, q_width,
                  delta_.data(), hidden, layer.o_bias);
    return {};
  }
  if (x8 != nullptr && layer.o_bias == nullptr && gemm_->fp8_gemm_path(layer.o, n, q_width)) {
    // Prefill rows (x8 set): o's scales left to the next norm (run_layers).
    return gemm_->linear_unscaled(gemm_->quantize(attn, q_width, n, q_width), layer.o, n, hidden,
                                  q_width, delta_.data(), hidden);
  }
  gemm_->linear(attn, q_width, layer.o, n, hidden, q_width, delta_.data(), hidden, layer.o_bias);
  return {};
}

void CudaModel::moe_mlp(const DeviceLayer& layer, int64_t n_tokens) {
  const ModelConfig& c = config_;
  const auto n = static_cast<int32_t>(n_tokens);
  const auto hidden = static_cast<int32_t>(c.hidden_size);
  const auto n_experts = static_cast<int32_t>(c.moe.n_experts);
  const auto k = static_cast<int32_t>(c.moe.n_experts_per_token);
  const int64_t inter = c.moe.expert_intermediate_size;
  gemm_->linear_f32(h_.data(), hidden, layer.router, n, n_experts, hidden, router_logits_.data(),
                    n_experts);
  moe_topk(router_logits_.data(), n, n_experts, k, c.moe.norm_topk_prob, topk_ids_.data(),
           topk_weights_.data(), stream_);
  // Grouping by expert needs the choices on the host (one sync per MoE layer).
  std::vector<int32_t> ids(size_t(n) * k);
  std::vector<float> weights(size_t(n) * k);
  SS_CUDA_CHECK(cudaMemcpyAsync(ids.data(), topk_ids_.data(), ids.size() * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
  SS_CUDA_CHECK(cudaMemcpyAsync(weights.data(), topk_weights_.data(),
                                weights.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Counting sort by expert (tokens ascending within an expert):
  // begin[e] .. begin[e + 1] are expert e's rows.
  std::vector<int32_t> begin(size_t(n_experts) + 1, 0);
  for (int32_t id : ids) ++begin[size_t(id) + 1];
  for (int32_t e = 0; e < n_experts; ++e) begin[size_t(e) + 1] += begin[size_t(e)];
  std::vector<int32_t> rows(ids.size());
  std::vector<float> row_weights(ids.size());
  std::vector<int32_t> next(begin.begin(), begin.end() - 1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t at = next[size_t(ids[i])]++;
    rows[size_t(at)] = static_cast<int32_t>(i / size_t(k));
    row_weights[size_t(at)] = weights[i];
  }
  SS_CUDA_CHECK(cudaMemcpyAsync(expert_rows_.data(), rows.data(), rows.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  SS_CUDA_CHECK(cudaMemcpyAsync(expert_weights_.data(), row_weights.data(),
                                row_weights.size() * sizeof(float), cudaMemcpyHostToDevice,
                                stream_));
  for (int32_t e = 0; e < n_experts; ++e) {
    const int32_t first = begin[size_t(e)];
    const int32_t count = begin[size_t(e) + 1] - first;
    if (count == 0) continue;
    const DeviceExpert& expert = layer.experts[size_t(e)];
    gather_rows(h_.data(), hidden, expert_rows_.data() + first, count, hidden, expert_in_.data(),
                stream_);
    gemm_->mlp(expert_in_.data(), hidden, expert.gate_up, expert.down, count, inter, hidden,
               expert_gate_up_.data(), expert_act_.data(), expert_out_.data(), hidden);
    scatter_add_weighted(expert_out_.data(), expert_rows_.data() + first,
                         expert_weights_.data() + first, count, hidden, x_.data(), stream_);
  }
  // The host vectors must outlive the async uploads above.
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace specstack::cuda

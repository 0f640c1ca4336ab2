#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace specstack {
namespace {

enum ScratchSlot : size_t {
  kScratchX,
  kScratchH,
  kScratchQ,
  kScratchK,
  kScratchV,
  kScratchAttn,
  kScratchOut,
  kScratchGate,
  kScratchUp,
  kScratchRouter,
  kScratchExpertIn,
  kScratchExpertGate,
  kScratchExpertUp,
  kScratchExpertOut,
  kScratchLogitIn,
  kScratchLogitLocal,
  kScratchGatherSend,
  kScratchGatherRecv,
  kScratchTailQ,
  kScratchTailX,
  kScratchCount,
};

}  // namespace

Transformer::Transformer(ModelConfig config, ModelWeights weights, Backend& backend,
                         TransformerShard shard)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), shard_(shard) {
  if (shard_.comm == nullptr) {
    shard_.vocab_chunk = config_.vocab_size;
    shard_.full_vocab = config_.vocab_size;
  }
  scratch_storage_.resize(kScratchCount);
  scratch_views_.resize(kScratchCount);
  tail_rows_only_ = last_layer_for_logit_rows_only();
}

Tensor& Transformer::scratch(size_t index, int64_t rows, int64_t cols) {
  Tensor& storage = scratch_storage_[index];
  if (!storage.defined() || storage.numel() < rows * cols) {
    storage = Tensor::zeros(DType::kF32, {std::max<int64_t>(rows * cols, 1)});
  }
  scratch_views_[index] = storage.slice_rows(0, rows * cols).reshape({rows, cols});
  return scratch_views_[index];
}

void Transformer::forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) {
  const int64_t n_tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t hidden = config_.hidden_size;
  SS_CHECK_GT(n_tokens, 0);
  if (batch.captured_queries != nullptr) {
    *batch.captured_queries =
        Tensor::zeros(DType::kF32, {static_cast<int64_t>(batch.capture_rows.size()),
                                    config_.n_layers, config_.n_heads * config_.head_dim});
  }
  x_ = scratch(kScratchX, n_tokens, hidden);
  h_ = scratch(kScratchH, n_tokens, hidden);
  embed(batch.token_ids);

  // The last layer past its K/V write runs for the logit rows alone when
  // fewer rows want logits than run (a prefill chunk): nothing reads the
  // other rows' outputs (the CUDA model does the same: StepMeta::
  // tail_rows_only). moe_mlp routes every row of h_, so an MoE last layer
  // keeps them all.
  const int64_t n_out = static_cast<int64_t>(batch.logit_rows.size());
  const int64_t last = config_.n_layers - 1;
  const bool tail = tail_rows_only_ && n_out < n_tokens && !config_.layer_is_moe(last);
  tail_steps_ += tail;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LayerWeights& layer = weights_.layers[static_cast<size_t>(l)];
    backend_.rmsnorm(x_, layer.attn_norm, static_cast<float>(config_.rms_norm_eps), h_);
    attention_block(l, batch, kv, tail && l == last);
    if (tail && l == last && n_out == 0) break;  // a chunk before the last: its K/V was all
    backend_.rmsnorm(x_, layer.ffn_norm, static_cast<float>(config_.rms_norm_eps), h_);
    if (config_.layer_is_moe(l)) {
      moe_mlp(layer);
    } else {
      dense_mlp(layer);
    }
  }

  // Only the requested rows go through the final norm and the vocab matmul
  // (after a tail, x_ holds exactly those rows, in order).
  logits = Tensor::zeros(DType::kF32, {n_out, shard_.full_vocab});
  if (n_out == 0) return;
  Tensor& rows = scratch(kScratchLogitIn, n_out, hidden);
  for (int64_t i = 0; i < n_out; ++i) {
    const int32_t src = tail ? static_cast<int32_t>(i) : batch.logit_rows[static_cast<size_t>(i)];
    SS_CHECK_LT(src, x_.size(0));
    std::copy_n(x_.f32() + src * hidden, hidden, rows.f32() + i * hidden);
  }
  backend_.rmsnorm(rows, weights_.final_norm, static_cast<float>(config_.rms_norm_eps), rows);
  lm_head(rows, logits);
}

void Transformer::embed(std::span<const int32_t> token_ids) {
  if (shard_.comm == nullptr) {
    backend_.embedding(weights_.embed, token_ids, x_);
    return;
  }
  // Vocab-parallel: each rank looks up the ids in its rows and leaves the
  // others zero; the all-reduce then assembles every row from its one owner.
  const int64_t hidden = config_.hidden_size;
  std::vector<int32_t> local(token_ids.size());
  std::vector<bool> mine(token_ids.size());
  for (size_t i = 0; i < token_ids.size(); ++i) {
    // As in the backend's lookup: the caller validated user ids, so an id
    // outside the full vocabulary is a bug (not a silently zero row).
    SS_CHECK(token_ids[i] >= 0 && token_ids[i] < shard_.full_vocab);
    const int64_t row = token_ids[i] - shard_.vocab_begin;
    mine[i] = row >= 0 && row < config_.vocab_size;
    local[i] = mine[i] ? static_cast<int32_t>(row) : 0;
  }
  backend_.embedding(weights_.embed, local, x_);
  for (size_t i = 0; i < token_ids.size(); ++i) {
    if (!mine[i]) std::fill_n(x_.f32() + static_cast<int64_t>(i) * hidden, hidden, 0.0f);
  }
  all_reduce(x_);
}

void Transformer::lm_head(const Tensor& rows, Tensor& logits) {
  if (shard_.comm == nullptr) {
    backend_.matmul(rows, weights_.lm_head, nullptr, logits);
    return;
  }
  // Each rank computes its vocab columns, padded to vocab_chunk so every rank
  // sends the same count (as NCCL's all-gather needs); then the blocks
  // [rank][row][chunk] are laid out as [row][vocab].
  const int64_t n_out = rows.size(0);
  const int64_t chunk = shard_.vocab_chunk;
  const int64_t n_ranks = shard_.comm->size();
  Tensor& local = scratch(kScratchLogitLocal, n_out, config_.vocab_size);  // [n_out, vocab_r]
  backend_.matmul(rows, weights_.lm_head, nullptr, local);
  Tensor& send = scratch(kScratchGatherSend, n_out, chunk);  // [n_out, chunk]
  std::fill_n(send.f32(), send.numel(), 0.0f);
  for (int64_t i = 0; i < n_out; ++i) {
    std::copy_n(local.f32() + i * config_.vocab_size, config_.vocab_size, send.f32() + i * chunk);
  }
  Tensor& recv = scratch(kScratchGatherRecv, n_ranks * n_out, chunk);  // [n_ranks * n_out, chunk]
  shard_.comm->all_gather(send.f32(), send.numel(), recv.f32());
  for (int64_t r = 0; r < n_ranks; ++r) {
    const int64_t begin = r * chunk;
    const int64_t count = std::min(chunk, shard_.full_vocab - begin);
    for (int64_t i = 0; i < n_out; ++i) {
      std::copy_n(recv.f32() + (r * n_out + i) * chunk, count,
                  logits.f32() + i * shard_.full_vocab + begin);
    }
  }
}

void Transformer::all_reduce(Tensor& partial) {
  if (shard_.comm != nullptr) shard_.comm->all_reduce_sum(partial.f32(), partial.numel());
}

void Transformer::attention_block(int64_t l, const ForwardBatch& batch, KvCache& kv, bool tail) {
  const LayerWeights& layer = weights_.layers[static_cast<size_t>(l)];
  const int64_t n_tokens = h_.size(0);
  const int64_t head_dim = config_.head_dim;
  const int64_t q_width = config_.n_heads * head_dim;
  const int64_t kv_width = config_.n_kv_heads * head_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);

  Tensor& q = scratch(kScratchQ, n_tokens, q_width);   // [n_tokens, n_heads * head_dim]
  Tensor& k = scratch(kScratchK, n_tokens, kv_width);  // [n_tokens, n_kv_heads * head_dim]
  Tensor& v = scratch(kScratchV, n_tokens, kv_width);  // [n_tokens, n_kv_heads * head_dim]
  backend_.matmul(h_, layer.wq, layer.bq.defined() ? &layer.bq : nullptr, q);
  backend_.matmul(h_, layer.wk, layer.bk.defined() ? &layer.bk : nullptr, k);
  backend_.matmul(h_, layer.wv, layer.bv.defined() ? &layer.bv : nullptr, v);
  if (config_.qk_norm) {  // per-head RMSNorm before RoPE (qwen3)
    Tensor q_heads = q.reshape({n_tokens * config_.n_heads, head_dim});
    Tensor k_heads = k.reshape({n_tokens * config_.n_kv_heads, head_dim});
    backend_.rmsnorm(q_heads, layer.q_norm, eps, q_heads);
    backend_.rmsnorm(k_heads, layer.k_norm, eps, k_heads);
  }
  backend_.rope(q, head_dim, batch.attention.token_pos, weights_.rope_inv_freq);
  backend_.rope(k, head_dim, batch.attention.token_pos, weights_.rope_inv_freq);
  backend_.write_kv(k, v, batch.attention, kv.layer(l));
  if (batch.captured_queries != nullptr) {
    float* out = batch.captured_queries->f32();
    for (size_t i = 0; i < batch.capture_rows.size(); ++i) {
      std::copy_n(q.f32() + batch.capture_rows[i] * q_width, q_width,
                  out + (static_cast<int64_t>(i) * config_.n_layers + l) * q_width);
    }
  }

  AttentionParams params;
  params.n_heads = config_.n_heads;
  params.n_kv_heads = config_.n_kv_heads;
  params.head_dim = head_dim;
  params.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  params.sliding_window = config_.layer_is_sliding(l) ? config_.sliding_window : 0;
  int64_t rows = n_tokens;
  const Tensor* queries = &q;
  AttentionBatch rows_batch = batch.attention;
  std::vector<int32_t> row_seq, row_slot, row_pos;  // the tail's rows (rows_batch's spans)
  if (tail) {
    // The logit rows alone from here on: their queries, their residual rows
    // (x_ becomes [n_out, hidden], in logit order) and h_ as wide.
    const int64_t hidden = config_.hidden_size;
    rows = static_cast<int64_t>(batch.logit_rows.size());
    if (rows == 0) return;
    Tensor& q_rows = scratch(kScratchTailQ, rows, q_width);  // [rows, n_heads * head_dim]
    Tensor& x_rows = scratch(kScratchTailX, rows, hidden);   // [rows, hidden]
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t r = batch.logit_rows[static_cast<size_t>(i)];
      std::copy_n(q.f32() + r * q_width, q_width, q_rows.f32() + i * q_width);
      std::copy_n(x_.f32() + r * hidden, hidden, x_rows.f32() + i * hidden);
      row_seq.push_back(batch.attention.token_seq[static_cast<size_t>(r)]);
      row_slot.push_back(batch.attention.token_slot[static_cast<size_t>(r)]);
      row_pos.push_back(batch.attention.token_pos[static_cast<size_t>(r)]);
    }
    rows_batch.token_seq = row_seq;
    rows_batch.token_slot = row_slot;
    rows_batch.token_pos = row_pos;
    queries = &q_rows;
    x_ = x_rows;
    h_ = scratch(kScratchH, rows, hidden);
  }
  Tensor& attn = scratch(kScratchAttn, rows, q_width);
  backend_.attention(*queries, rows_batch, kv.layer(l), params, attn);

  Tensor& out = scratch(kScratchOut, rows, config_.hidden_size);
  backend_.matmul(attn, layer.wo, layer.bo.defined() ? &layer.bo : nullptr, out);
  all_reduce(out);  // o_proj's input rows are split: each rank holds a partial sum
  backend_.add_inplace(x_, out);
}

void Transformer::dense_mlp(const LayerWeights& layer) {
  const int64_t n_tokens = h_.size(0);
  const int64_t inter = config_.intermediate_size;
  Tensor& gate = scratch(kScratchGate, n_tokens, inter);  // [n_tokens, inter]
  Tensor& up = scratch(kScratchUp, n_tokens, inter);      // [n_tokens, inter]
  backend_.matmul(h_, layer.w_gate, nullptr, gate);
  backend_.matmul(h_, layer.w_up, nullptr, up);
  backend_.silu_mul(gate, up, gate);
  Tensor& out = scratch(kScratchOut, n_tokens, config_.hidden_size);
  backend_.matmul(gate, layer.w_down, nullptr, out);
  all_reduce(out);  // down_proj's input rows are split
  backend_.add_inplace(x_, out);
}

void Transformer::moe_mlp(const LayerWeights& layer) {
  const int64_t n_tokens = h_.size(0);
  const int64_t hidden = config_.hidden_size;
  const int64_t n_experts = config_.moe.n_experts;
  const int64_t top_k = config_.moe.n_experts_per_token;
  const int64_t inter = config_.moe.expert_intermediate_size;

  // Routing: softmax over all experts in fp32, top-k, optional renormalisation.
  Tensor& router = scratch(kScratchRouter, n_tokens, n_experts);  // [n_tokens, n_experts]
  backend_.matmul(h_, layer.router, nullptr, router);
  backend_.softmax_rows(router);
  std::vector<std::vector<std::pair<int32_t, float>>> routed(static_cast<size_t>(n_experts));
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* probs = router.f32() + t * n_experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float total = 0.0f;
    for (int64_t i = 0; i < top_k; ++i) total += probs[order[static_cast<size_t>(i)]];
    for (int64_t i = 0; i < top_k; ++i) {
      int32_t e = order[static_cast<size_t>(i)];
      float w = config_.moe.norm_topk_prob ? probs[e] / total : probs[e];
      routed[static_cast<size_t>(e)].emplace_back(static_cast<int32_t>(t), w);
    }
  }

  // Each expert runs once on the tokens routed to it; results are scattered back weighted.
  Tensor& out = scratch(kScratchOut, n_tokens, hidden);
  std::fill_n(out.f32(), out.numel(), 0.0f);
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& tokens = routed[static_cast<size_t>(e)];
    if (tokens.empty()) continue;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const ExpertWeights& expert = layer.experts[static_cast<size_t>(e)];
    Tensor& in = scratch(kScratchExpertIn, n, hidden);     // [n, hidden]
    Tensor& gate = scratch(kScratchExpertGate, n, inter);  // [n, inter]
    Tensor& up = scratch(kScratchExpertUp, n, inter);      // [n, inter]
    Tensor& down = scratch(kScratchExpertOut, n, hidden);  // [n, hidden]
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(h_.f32() + tokens[static_cast<size_t>(i)].first * hidden, hidden,
                  in.f32() + i * hidden);
    }
    backend_.matmul(in, expert.w_gate, nullptr, gate);
    backend_.matmul(in, expert.w_up, nullptr, up);
    backend_.silu_mul(gate, up, gate);
    backend_.matmul(gate, expert.w_down, nullptr, down);
    for (int64_t i = 0; i < n; ++i) {
      const auto [t, w] = tokens[static_cast<size_t>(i)];
      float* dst = out.f32() + t * hidden;
      const float* src = down.f32() + i * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] += w * src[d];
    }
  }
  // Every expert's down_proj is split: one all-reduce of the weighted sum (the
  // routing is the same on every rank, computed from the same replicated h_).
  all_reduce(out);
  backend_.add_inplace(x_, out);
}

}  // namespace specstack

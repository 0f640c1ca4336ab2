// Decode graphs: the whole forward of a decode step (one token per
// sequence) captured once per batch size at start-up and replayed with new
// metadata, so steady decode pays one launch per step instead of ~10 per
// layer, and no shape is seen for the first time while serving.
#include <algorithm>
#include <cstring>

#include "cuda/attention.h"
#include "cuda/cuda_model_internal.h"
#include "cuda/verify_attention.h"

namespace specstack::cuda {

namespace {

// Capture graphs copy every row's queries out: worth it for lookahead steps
// of a few drafts at once, not for large decode batches.
constexpr int32_t kCaptureGraphMaxBatch = 8;

int32_t graph_max_blocks(int32_t max_context, int64_t block_size) {
  return static_cast<int32_t>((max_context + block_size - 1) / block_size);
}

}  // namespace

void CudaModel::capture_decode_graphs(CudaKvCache& kv, int32_t max_context) {
  graphs_.clear();
  capture_graphs_.clear();
  if (config_.moe.n_experts > 0 || options_.graph_batch_sizes.empty() || max_context <= 0) return;
  graph_kv_ = &kv;
  graph_max_context_ = max_context;
  prepare_one_launch(kv);  // outside capture: it uploads the layer table
  const int32_t largest =
      *std::max_element(options_.graph_batch_sizes.begin(), options_.graph_batch_sizes.end());
  ensure_scratch(largest);
  logits_.reserve(size_t(largest) * config_.vocab_size);
  head_in_.reserve(size_t(largest) * config_.hidden_size);

  for (int32_t batch_size : options_.graph_batch_sizes) {
    graphs_[batch_size] = capture_graph(kv, batch_size, false);
    if (batch_size <= kCaptureGraphMaxBatch) {
      capture_graphs_[batch_size] = capture_graph(kv, batch_size, true);
    }
  }
}

std::unique_ptr<CudaModel::Graph> CudaModel::capture_graph(CudaKvCache& kv, int32_t batch_size,
                                                           bool with_capture) {
  const int64_t block_size = kv.shape().block_size;
  const int32_t max_context = graph_max_context_;
  auto graph = std::make_unique<Graph>();
  graph->batch = batch_size;
  // An empty batch padded to batch_size: every row is padding (no KV
  // writes), which is exactly the layout a real decode step stages.
  ForwardBatch empty;
  std::vector<int32_t> staged;
  const MetaOffsets offsets =
      plan_step(empty, block_size, false, run_group(), batch_size,
                graph_max_blocks(max_context, block_size), max_context, graph->step, staged);
  graph->meta.resize(staged.size());
  graph->meta.upload(staged);
  set_device_pointers(offsets, graph->meta.data(), graph->step);
  graph->step.paged_partition =
      paged_attention_partition_size(batch_size, static_cast<int32_t>(config_.n_kv_heads));
  graph->step.paged_run_partition = run_attention_graph_partition_size(
      batch_size, static_cast<int32_t>(config_.n_kv_heads), graph->step.paged_partition);
  graph->step.paged_run_grid_parts =
      run_attention_graph_grid_parts(batch_size, static_cast<int32_t>(config_.n_kv_heads));
  // Few (row, kv head) groups: split each row's keys at replay time over
  // enough CTAs for the context the step has, not the capacity.
  graph->step.paged_run_split =
      graph->step.paged_run != nullptr
          ? run_attention_split(batch_size, static_cast<int32_t>(config_.n_kv_heads), max_context)
          : 0;
  graph->attn_workspace.resize(paged_attention_workspace_floats(
      batch_size, static_cast<int32_t>(config_.n_heads), static_cast<int32_t>(config_.head_dim),
      max_context, graph->step.paged_partition, graph->step.paged_run_split));
  graph->step.attn_workspace = graph->attn_workspace.data();
  if (with_capture) {
    graph->captured.resize(size_t(batch_size) * config_.n_layers * config_.n_heads *
                           config_.head_dim);
    graph->step.capture_device = graph->captured.data();
  }

  // One eager run first: cuBLAS picks and loads its kernels outside capture.
  run_layers(graph->step, kv, /*graph_safe=*/true);
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaGraph_t captured = nullptr;
  SS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  run_layers(graph->step, kv, /*graph_safe=*/true);
  SS_CUDA_CHECK(cudaStreamEndCapture(stream_, &captured));
  SS_CUDA_CHECK(cudaGraphInstantiate(&graph->exec, captured, 0));
  SS_CUDA_CHECK(cudaGraphDestroy(captured));
  SS_CUDA_CHECK(cudaGraphLaunch(graph->exec, stream_));  // pre-warm the replay path
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return graph;
}

CudaModel::Graph* CudaModel::replay_graph(const ForwardBatch& batch, const CudaKvCache& kv) {
  if (graphs_.empty() || &kv != graph_kv_) return nullptr;
  const auto n = static_cast<int32_t>(batch.token_ids.size());
  const auto& att = batch.attention;
  // Query capture (draft lookahead) replays a capture graph: every row captured.
  const bool capture = !batch.capture_rows.empty();
  if (capture) {
    if (batch.capture_rows.size() != size_t(n)) return nullptr;
    for (int32_t t = 0; t < n; ++t) {
      if (batch.capture_rows[size_t(t)] != t) return nullptr;
    }
  }
  // Decode shape: one token per sequence, each wanting logits, within capacity.
  if (att.block_tables.size() != size_t(n) || batch.logit_rows.size() != size_t(n)) {
    return nullptr;
  }
  std::vector<char> seen(size_t(n), 0);
  const int32_t max_blocks = graph_max_blocks(graph_max_context_, kv.shape().block_size);
  for (int32_t t = 0; t < n; ++t) {
    const int32_t seq = att.token_seq[size_t(t)];
    if (seq < 0 || seq >= n || seen[size_t(seq)] || batch.logit_rows[size_t(t)] != t) {
      return nullptr;
    }
    seen[size_t(seq)] = 1;
    if (att.token_slot[size_t(t)] + 1 > graph_max_context_) return nullptr;
    if (static_cast<int32_t>(att.block_tables[size_t(seq)].size()) > max_blocks) return nullptr;
  }
  auto& pool = capture ? capture_graphs_ : graphs_;
  auto it = pool.lower_bound(n);
  return it == pool.end() ? nullptr : it->second.get();
}

bool CudaModel::try_graph_forward(const ForwardBatch& batch, CudaKvCache& kv, Tensor& logits) {
  Graph* replay = replay_graph(batch, kv);
  if (replay == nullptr) return false;
  Graph& graph = *replay;
  const auto n = static_cast<int32_t>(batch.token_ids.size());
  const bool capture = !batch.capture_rows.empty();
  const int32_t max_blocks = graph_max_blocks(graph_max_context_, kv.shape().block_size);

  std::vector<int32_t> staged;
  StepMeta host_meta;
  plan_step(batch, kv.shape().block_size, false, run_group(), graph.batch, max_blocks,
            graph_max_context_, host_meta, staged);
  SS_CHECK_EQ(staged.size(), graph.meta.size());
  grow_pinned(reinterpret_cast<void**>(&meta_host_), &meta_host_capacity_,
              staged.size() * sizeof(int32_t));
  std::memcpy(meta_host_, staged.data(), staged.size() * sizeof(int32_t));
  SS_CUDA_CHECK(cudaMemcpyAsync(graph.meta.data(), meta_host_, staged.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));
  SS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream_));
  const size_t capture_count =
      capture ? size_t(n) * config_.n_layers * config_.n_heads * config_.head_dim : 0;
  if (capture) {
    grow_pinned(reinterpret_cast<void**>(&capture_host_), &capture_host_capacity_,
                capture_count * sizeof(bf16));
    SS_CUDA_CHECK(cudaMemcpyAsync(capture_host_, graph.captured.data(),
                                  capture_count * sizeof(bf16), cudaMemcpyDeviceToHost, stream_));
  }
  finish_step(batch, n, logits);  // waits for the stream
  if (capture) captured_to_f32(capture_host_, capture_count, batch.captured_queries->f32());
  ++graph_replays_;
  return true;
}

bool CudaModel::forward_follow(std::span<const ForwardBatch> steps, KvCache& kv_base) {
  auto* kv = dynamic_cast<CudaKvCache*>(&kv_base);
  if (!follow_graphs_ || kv == nullptr || steps.empty()) return false;
  const auto n = static_cast<int32_t>(steps[0].token_ids.size());
  // The first step's tokens are the last forward's picks, still on the device.
  if (device_picks_ != n) return false;
  // Every step replays the same graph (argmax picking alone: the sampling
  // inputs go up once for all of them).
  Graph* graph = nullptr;
  for (const ForwardBatch& step : steps) {
    const bool greedy = step.picked_tokens != nullptr && step.sampling.empty() &&
                        step.host_rows.empty() && step.top_logprobs.empty() &&
                        step.keep_rows.empty() && step.verifications.empty() &&
                        (step.masks == nullptr || step.masks->empty());
    if (!greedy || step.token_ids.size() != size_t(n) ||
        step.capture_rows.size() != steps[0].capture_rows.size()) {
      return false;
    }
    Graph* replay = replay_graph(step, *kv);
    if (replay == nullptr || (graph != nullptr && replay != graph)) return false;
    graph = replay;
  }
  prepare_one_launch(*kv);
  const int64_t block_size = kv->shape().block_size;
  const int32_t max_blocks = graph_max_blocks(graph_max_context_, block_size);
  const size_t n_steps = steps.size();
  const size_t meta_words = graph->meta.size();
  const size_t capture_count =
      steps[0].capture_rows.empty()
          ? 0
          : size_t(n) * config_.n_layers * config_.n_heads * config_.head_dim;
  // Pinned staging for every step at once (the copies run after this call
  // has moved on): metadata, then the picks and the queries coming back.
  grow_pinned(reinterpret_cast<void**>(&follow_host_), &follow_host_capacity_,
              n_steps * (meta_words + size_t(n)) * sizeof(int32_t) +
                  n_steps * capture_count * sizeof(bf16));
  int32_t* metas = follow_host_;                                         // [n_steps, meta_words]
  int32_t* picks = metas + n_steps * meta_words;                         // [n_steps, n]
  auto* queries = reinterpret_cast<bf16*>(picks + n_steps * size_t(n));  // [n_steps, capture_count]
  std::vector<int32_t> staged;
  StepMeta host_meta;
  size_t ids_offset = 0;
  for (size_t j = 0; j < n_steps; ++j) {
    const MetaOffsets offsets = plan_step(steps[j], block_size, false, run_group(), graph->batch,
                                          max_blocks, graph_max_context_, host_meta, staged);
    SS_CHECK_EQ(staged.size(), meta_words);
    ids_offset = offsets.ids;
    std::memcpy(metas + j * meta_words, staged.data(), meta_words * sizeof(int32_t));
  }
  const PickInputs in = upload_pick_inputs(steps[0], n);
  for (size_t j = 0; j < n_steps; ++j) {
    SS_CUDA_CHECK(cudaMemcpyAsync(graph->meta.data(), metas + j * meta_words,
                                  meta_words * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    // The tokens the step before picked (its logit rows are these rows, in order).
    SS_CUDA_CHECK(cudaMemcpyAsync(graph->meta.data() + ids_offset, picked_ids_.data(),
                                  size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_));
    SS_CUDA_CHECK(cudaGraphLaunch(graph->exec, stream_));
    pick_tokens(n, in);
    SS_CUDA_CHECK(cudaMemcpyAsync(picks + j * size_t(n), picked_ids_.data(),
                                  size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
    if (capture_count > 0) {
      SS_CUDA_CHECK(cudaMemcpyAsync(queries + j * capture_count, graph->captured.data(),
                                    capture_count * sizeof(bf16), cudaMemcpyDeviceToHost, stream_));
    }
  }
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const int64_t q_width = config_.n_heads * config_.head_dim;
  for (size_t j = 0; j < n_steps; ++j) {
    const ForwardBatch& step = steps[j];
    step.picked_tokens->assign(picks + j * size_t(n), picks + (j + 1) * size_t(n));
    if (capture_count == 0 || step.captured_queries == nullptr) continue;
    *step.captured_queries = Tensor::zeros(DType::kF32, {n, config_.n_layers, q_width});
    captured_to_f32(queries + j * capture_count, capture_count, step.captured_queries->f32());
  }
  graph_replays_ += static_cast<int64_t>(n_steps);
  follow_steps_ += static_cast<int64_t>(n_steps);
  return true;
}

}  // namespace specstack::cuda

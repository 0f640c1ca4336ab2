// CudaModel::score_prompt: SpecPrefill importance on the device. Only the
// captured queries (a few KB) travel to the GPU and the importance vector
// back; the draft's keys stay in its paged cache.
#include <cmath>

#include "cuda/cuda_model_internal.h"
#include "cuda/score.h"

namespace specstack::cuda {

Result<std::vector<float>> CudaModel::score_prompt(const AttentionCapture& capture, CudaKvCache& kv,
                                                   std::span<const int32_t> block_table,
                                                   int64_t slot_begin, int64_t slot_end,
                                                   int64_t pool_kernel) {
  SS_TRY(capture.validate());
  const KvCacheShape& shape = kv.shape();
  if (capture.n_layers != shape.n_layers || capture.n_heads != config_.n_heads ||
      capture.head_dim != shape.head_dim) {
    return make_error("the capture does not match the draft model");
  }
  if (pool_kernel < 1 || pool_kernel % 2 == 0) {
    return errorf("pooling width must be a positive odd number, got {}", pool_kernel);
  }
  if (slot_begin < 0 || slot_end <= slot_begin ||
      slot_end > static_cast<int64_t>(block_table.size()) * shape.block_size) {
    return errorf("scored slots [{}, {}) are outside the block table", slot_begin, slot_end);
  }
  std::vector<int32_t> scored;
  for (int64_t l = 0; l < capture.n_layers; ++l) {
    if (!capture.is_sliding(l)) scored.push_back(static_cast<int32_t>(l));
  }
  if (scored.empty()) return make_error("every draft layer is sliding-window: nothing to score");

  // Pinned staging (pageable copies go through the driver's bounce buffer and
  // wait): the queries [n_steps, n_layers, H * D], then the block table, then
  // the importance coming back [n_tokens].
  const int64_t steps = capture.n_steps, layers = capture.n_layers;
  const int64_t q_width = capture.n_heads * capture.head_dim;
  const auto n_tokens = static_cast<int32_t>(slot_end - slot_begin);
  const size_t n_queries = static_cast<size_t>(steps * layers * q_width);
  grow_pinned(reinterpret_cast<void**>(&score_host_), &score_host_capacity_,
              (n_queries + block_table.size() + size_t(n_tokens)) * sizeof(float));
  float* queries = score_host_;
  auto* table = reinterpret_cast<int32_t*>(queries + n_queries);
  float* importance = reinterpret_cast<float*>(table + block_table.size());
  // [n_layers, n_steps, H, D] (capture) -> [n_steps, n_layers, H * D] (kernel).
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t t = 0; t < steps; ++t) {
      const float* src = capture.query(l, t);
      std::copy(src, src + q_width, queries + (t * layers + l) * q_width);
    }
  }
  std::copy(block_table.begin(), block_table.end(), table);
  // Scratch kept on the model between prompts: a cudaFree per buffer per
  // prompt synchronised the device and cost more than the scoring kernels.
  score_queries_.reserve(n_queries);
  score_table_.reserve(block_table.size());
  score_out_.reserve(static_cast<size_t>(n_tokens));
  score_workspace_.reserve(score_workspace_floats(static_cast<int32_t>(steps),
                                                  static_cast<int32_t>(config_.n_heads), n_tokens));
  SS_CUDA_CHECK(cudaMemcpyAsync(score_queries_.data(), queries, n_queries * sizeof(float),
                                cudaMemcpyHostToDevice, stream_));
  SS_CUDA_CHECK(cudaMemcpyAsync(score_table_.data(), table, block_table.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice, stream_));

  ScoreArgs args;
  args.queries = score_queries_.data();
  args.n_steps = static_cast<int32_t>(steps);
  args.n_layers = static_cast<int32_t>(layers);
  args.n_heads = static_cast<int32_t>(config_.n_heads);
  args.n_kv_heads = static_cast<int32_t>(config_.n_kv_heads);
  args.head_dim = static_cast<int32_t>(config_.head_dim);
  args.scored_layers = scored.data();
  args.n_scored = static_cast<int32_t>(scored.size());
  args.k_caches = kv.k_layers();
  args.block_table = score_table_.data();
  args.block_size = static_cast<int32_t>(shape.block_size);
  args.slot_begin = static_cast<int32_t>(slot_begin);
  args.slot_end = static_cast<int32_t>(slot_end);
  args.pool_kernel = static_cast<int32_t>(pool_kernel);
  args.importance = score_out_.data();
  args.workspace = score_workspace_.data();
  score_tokens(args, stream_);
  SS_CUDA_CHECK(cudaMemcpyAsync(importance, score_out_.data(), size_t(n_tokens) * sizeof(float),
                                cudaMemcpyDeviceToHost, stream_));
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<float> out(importance, importance + n_tokens);
  for (float v : out) {
    if (!std::isfinite(v)) return make_error("a token importance came out non-finite");
  }
  return out;
}

}  // namespace specstack::cuda

#include "parallel/tensor_parallel_model.h"

#include <algorithm>

#include "parallel/sharded_weight_source.h"

namespace specstack {

TensorParallelModel::TensorParallelModel(ShardPlan plan)
    : plan_(std::move(plan)), group_(static_cast<int>(plan_.n_ranks())) {}

Result<std::unique_ptr<TensorParallelModel>> TensorParallelModel::create(
    const ModelConfig& config, WeightSource& source, const TensorParallelOptions& options) {
  SS_ASSIGN_OR_RETURN(ShardPlan plan, ShardPlan::make(config, options.n_ranks));
  std::unique_ptr<TensorParallelModel> model(new TensorParallelModel(std::move(plan)));
  const int64_t n = model->n_ranks();
  model->threads_per_rank_ = std::max(1, options.total_threads / static_cast<int>(n));
  const int64_t steps = config.n_layers + 1;
  for (int64_t r = 0; r < n; ++r) {
    const ModelConfig rank_config = model->plan_.rank_config(r);
    ShardedWeightSource rank_source(source, model->plan_, r);
    LoadProgress progress;
    if (options.on_progress) {
      progress = [&, r](int64_t done, int64_t) {
        options.on_progress(r * steps + done, n * steps);
      };
    }
    SS_ASSIGN_OR_RETURN(
        ModelWeights weights,
        build_quantized_weights(rank_config, rank_source, options.quantization, progress));
    if (r > 0) {  // o_proj's bias is added once, by rank 0, before the all-reduce
      for (LayerWeights& layer : weights.layers) layer.bo = Tensor();
    }
    Rank rank;
    rank.backend = std::make_unique<CpuBackend>(CpuBackendOptions{model->threads_per_rank_});
    const RankShape shape = model->plan_.rank_shape(r);
    TransformerShard shard;
    shard.comm = &model->group_.rank(static_cast<int>(r));
    shard.vocab_begin = shape.vocab_begin;
    shard.vocab_chunk = model->plan_.vocab_chunk();
    shard.full_vocab = config.vocab_size;
    rank.model =
        std::make_unique<Transformer>(rank_config, std::move(weights), *rank.backend, shard);
    model->ranks_.push_back(std::move(rank));
  }
  for (int64_t r = 1; r < n; ++r) {
    model->workers_.emplace_back([m = model.get(), r] { m->worker_loop(r); });
  }
  return model;
}

TensorParallelModel::~TensorParallelModel() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

size_t TensorParallelModel::weight_bytes() const {
  size_t n = 0;
  for (const Rank& r : ranks_) n += r.model->weight_bytes();
  return n;
}

std::unique_ptr<ShardedKvCache> TensorParallelModel::make_kv_cache(int64_t n_blocks,
                                                                   int64_t block_size,
                                                                   DType dtype) const {
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const Rank& r : ranks_) {
    KvCacheShape rank_shape = r.model->kv_shape(n_blocks, block_size);
    rank_shape.dtype = dtype;
    caches.push_back(std::make_unique<KvCache>(rank_shape));
  }
  KvCacheShape shape = kv_shape(n_blocks, block_size);
  shape.dtype = dtype;
  return std::make_unique<ShardedKvCache>(shape, std::move(caches));
}

void TensorParallelModel::worker_loop(int64_t r) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_rank(r);
    std::lock_guard lock(mutex_);
    if (--pending_ == 0) done_.notify_one();
  }
}

void TensorParallelModel::run_rank(int64_t r) {
  Rank& rank = ranks_[static_cast<size_t>(r)];
  Tensor& logits = r == 0 ? *step_logits_ : rank.logits;
  rank.model->forward(rank.batch, step_kv_->rank(r), logits);
}

void TensorParallelModel::forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) {
  auto* sharded = dynamic_cast<ShardedKvCache*>(&kv);
  SS_CHECK_MSG(sharded != nullptr && sharded->n_ranks() == n_ranks(),
               "TensorParallelModel::forward needs the ShardedKvCache from make_kv_cache");
  for (Rank& rank : ranks_) {
    rank.batch = batch;
    rank.batch.picked_tokens = nullptr;  // every row's logits come back (see below)
    rank.batch.sampling = {};
    rank.batch.host_rows = {};
    rank.batch.top_logprobs = {};
    rank.batch.logprobs = nullptr;
    rank.batch.masks = nullptr;
    rank.batch.prepare_masks = nullptr;
    rank.batch.captured_queries = batch.captured_queries != nullptr ? &rank.captured : nullptr;
  }
  {
    std::lock_guard lock(mutex_);
    step_kv_ = sharded;
    step_logits_ = &logits;
    pending_ = n_ranks() - 1;
    ++generation_;
  }
  start_.notify_all();
  run_rank(0);
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  if (batch.captured_queries != nullptr) merge_captured_queries(batch);
  // Tokens are not picked here: the full logits go back and ModelRunner
  // picks them by the same rule (ForwardBatch::picked_tokens left empty).
}

void TensorParallelModel::merge_captured_queries(const ForwardBatch& batch) {
  // Rank r captured [rows, layers, heads_r * head_dim] for q heads
  // [r * heads_r, (r + 1) * heads_r): interleave into the full head order.
  const ModelConfig& c = config();
  const int64_t rows = static_cast<int64_t>(batch.capture_rows.size());
  const int64_t width = c.n_heads * c.head_dim;
  const int64_t rank_width = width / n_ranks();
  *batch.captured_queries = Tensor::zeros(DType::kF32, {rows, c.n_layers, width});
  float* out = batch.captured_queries->f32();
  for (int64_t r = 0; r < n_ranks(); ++r) {
    const float* in = ranks_[static_cast<size_t>(r)].captured.f32();
    for (int64_t i = 0; i < rows * c.n_layers; ++i) {
      std::copy_n(in + i * rank_width, rank_width, out + i * width + r * rank_width);
    }
  }
}

}  // namespace specstack

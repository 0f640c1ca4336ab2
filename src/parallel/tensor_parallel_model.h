// TensorParallelModel: a ForwardModel made of N rank Transformers, each on its
// shard of the weights (ShardPlan) with a ThreadCommunicator, each rank on its
// own persistent thread (rank 0 on the caller's). forward() runs the same
// ForwardBatch on every rank against that rank's part of a ShardedKvCache and
// returns the full logits, so ModelRunner, the scheduler and the block manager
// above see one model and one cache.
//
// On the CPU this is a correctness reference for the sharding rules (and what
// the NCCL ranks must reproduce), not a speed-up: the ranks share the same
// cores. Thread budget: the caller's backend threads are divided among the
// ranks (each rank's CpuBackend gets max(1, threads / N), counting the rank
// thread itself), so N ranks never run more than max(threads, N) threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/forward_model.h"
#include "model/transformer.h"
#include "parallel/shard_plan.h"
#include "parallel/sharded_kv_cache.h"
#include "parallel/thread_communicator.h"

namespace specstack {

struct TensorParallelOptions {
  int64_t n_ranks = 2;
  int total_threads = 1;  // the CPU threads all ranks together may use
  WeightQuantization quantization = WeightQuantization::kNone;
  // Progress over all ranks' loads: (done, total) with total = N * (layers + 1).
  LoadProgress on_progress;
};

class TensorParallelModel final : public ForwardModel {
 public:
  // Builds each rank's weights from `source` (the full checkpoint), one rank
  // at a time, each tensor sliced as it is taken (ShardedWeightSource).
  static Result<std::unique_ptr<TensorParallelModel>> create(const ModelConfig& config,
                                                             WeightSource& source,
                                                             const TensorParallelOptions& options);
  ~TensorParallelModel() override;

  Device device() const override { return Device::kCpu; }
  const ModelConfig& config() const override { return plan_.full_config(); }
  size_t weight_bytes() const override;
  const Tensor& rope_inv_freq() const override { return ranks_[0].model->rope_inv_freq(); }
  const ShardPlan& plan() const { return plan_; }
  int64_t n_ranks() const { return plan_.n_ranks(); }
  int threads_per_rank() const { return threads_per_rank_; }
  const Transformer& rank_model(int64_t r) const { return *ranks_[static_cast<size_t>(r)].model; }

  // A cache with n_blocks blocks on every rank, each holding its KV heads,
  // in `dtype` (--kv-dtype).
  std::unique_ptr<ShardedKvCache> make_kv_cache(int64_t n_blocks, int64_t block_size,
                                                DType dtype = DType::kF32) const;

  // `kv` must come from make_kv_cache. Captured queries (SpecPrefill) come
  // back in the full model's head order; greedy tokens are filled when asked.
  void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) override;

 private:
  struct Rank {
    std::unique_ptr<CpuBackend> backend;
    std::unique_ptr<Transformer> model;  // uses *backend: declared after it
    ForwardBatch batch;                  // this step's batch as the rank runs it
    Tensor logits;                       // ranks > 0: their copy of the full logits
    Tensor captured;                     // this rank's heads of the captured queries
  };
  explicit TensorParallelModel(ShardPlan plan);
  void run_rank(int64_t r);
  void worker_loop(int64_t r);
  void merge_captured_queries(const ForwardBatch& batch);

  ShardPlan plan_;
  int threads_per_rank_ = 1;
  ThreadCommunicatorGroup group_;
  std::vector<Rank> ranks_;

  // The step in flight, published to the workers under mutex_.
  ShardedKvCache* step_kv_ = nullptr;
  Tensor* step_logits_ = nullptr;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int64_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;  // ranks 1..N-1
};

}  // namespace specstack

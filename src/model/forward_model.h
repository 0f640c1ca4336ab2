// ForwardModel: what the engine needs from a loaded model, whatever device it
// runs on. Transformer (CPU, through a Backend) and cuda::CudaModel (GPU) both
// implement it; ModelRunner and everything above see only this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <span>
#include <string_view>

#include "backend/attention_batch.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/logit_masks.h"
#include "model/row_logprobs.h"
#include "model/row_sampling.h"
#include "model/row_verification.h"
#include "model/weights.h"
#include "tensor/tensor.h"

namespace specstack {

struct ForwardBatch {
  std::span<const int32_t> token_ids;   // [n_tokens]
  AttentionBatch attention;             // positions, slots, sequences, block tables
  std::span<const int32_t> logit_rows;  // ascending token indices whose logits are wanted
  // Ascending token indices whose queries (post q_norm, post-RoPE: exactly what
  // attention sees) are copied out for every layer into *captured_queries
  // [capture_rows.size(), n_layers, n_heads * head_dim] f32 host (resized by forward).
  std::span<const int32_t> capture_rows;
  Tensor* captured_queries = nullptr;
  // When set, the model may pick each logit row's token itself: it writes
  // them here ([logit_rows.size()], under `sampling` and `masks`) and fills
  // `logits` with the rows in host_rows only ([host_rows.size(), vocab]). A
  // model that leaves it empty returns every row's logits instead, and
  // ModelRunner picks the tokens on the host by the same rule.
  std::vector<int32_t>* picked_tokens = nullptr;
  std::span<const RowSampling> sampling;  // [logit_rows.size()]; empty: argmax
  std::span<const int32_t> host_rows;     // ascending indices into logit_rows
  // With picked_tokens: per logit row, -1 or the number of alternatives whose
  // logprobs come back with the picked token's into *logprobs
  // ([logit_rows.size()]; empty or null: none). A model that leaves
  // picked_tokens empty leaves these to ModelRunner too.
  std::span<const int32_t> top_logprobs;
  std::vector<RowLogprobs>* logprobs = nullptr;
  // With picked_tokens: the tokens each logit row may take (null: all),
  // valid only once prepare_masks (when set) has been called: a model calls
  // it after queuing the forward, before it picks the tokens (calls after
  // the first do nothing), so the masks are made while the device computes.
  const LogitMasks* masks = nullptr;
  const std::function<void()>* prepare_masks = nullptr;
  // With picked_tokens (a model that fills it honours these too; else
  // ModelRunner does): per logit row, the row of the model's kept rows
  // (kept_rows()) its logits are copied to, or -1 (empty: none) ...
  std::span<const int32_t> keep_rows;
  // ... and sampled speculative verifications against a draft's kept rows
  // on this model's device, outcomes into *verified [verifications.size()];
  // a verification's rows pick (and report logprobs of) the tokens it
  // emitted, row i the i-th.
  std::span<const RowVerification> verifications;
  KeptRows draft_rows;
  std::vector<VerifyOutcome>* verified = nullptr;
};

class ForwardModel {
 public:
  virtual ~ForwardModel() = default;

  virtual Device device() const = 0;
  virtual const ModelConfig& config() const = 0;
  // Bytes of weights as held for compute (bf16 on the GPU), for start-up reports.
  virtual size_t weight_bytes() const = 0;
  // RoPE inverse frequencies [head_dim / 2] f32 (host).
  virtual const Tensor& rope_inv_freq() const = 0;

  // Runs every token of the batch through the model, writing K/V into `kv`
  // (which must be this model's cache type), and fills logits
  // [logit_rows.size(), vocab] f32 on the host (resized by the call).
  virtual void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) = 0;

  // The follow steps of a multi-step plan (StepPlan::follow_steps) back to
  // back on the model's device, without a host round trip between them:
  // steps[j] is follow step j, argmax picking, one row a sequence; its token
  // ids are ignored: each row takes the token the model picked for the same
  // row in the step before (for steps[0], the last forward's logit rows, in
  // order). Fills each batch's picked_tokens (and captured_queries where set).
  // Returns false, having run nothing, where it cannot: the caller then runs
  // the steps one by one through forward.
  virtual bool forward_follow(std::span<const ForwardBatch> steps, KvCache& kv) {
    (void)steps;
    (void)kv;
    return false;
  }

  // Device memory in use on the model's GPU (all processes, as the driver
  // reports it), for /metrics; -1 for a host model.
  virtual int64_t device_memory_used_bytes() const { return -1; }

  // The rows the last forward that picked its tokens kept
  // (ForwardBatch::keep_rows), on the model's device; empty for a model
  // that never picks.
  virtual KeptRows kept_rows() const { return {}; }

  KvCacheShape kv_shape(int64_t n_blocks, int64_t block_size) const {
    KvCacheShape shape;
    shape.n_layers = config().n_layers;
    shape.n_blocks = n_blocks;
    shape.block_size = block_size;
    shape.n_kv_heads = config().n_kv_heads;
    shape.head_dim = config().head_dim;
    return shape;
  }
};

// Whether a forward may run its last layer past the K/V write for the logit
// rows alone (Transformer and cuda::CudaModel do, where fewer rows want
// logits than run): yes unless the process starts with
// SPECSTACK_LAST_LAYER_ALL_ROWS=1 (A/B runs; the logits agree to rounding).
inline bool last_layer_for_logit_rows_only() {
  const char* all_rows = std::getenv("SPECSTACK_LAST_LAYER_ALL_ROWS");
  return all_rows == nullptr || std::string_view(all_rows) != "1";
}

}  // namespace specstack

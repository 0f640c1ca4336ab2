// ModelRunner: executes a StepPlan on one model and its paged KV cache.
// It checks the plan's internal consistency (a broken plan is a scheduler
// bug, so it is a check failure, not a user error) and returns the logits of
// the rows the plan asked for.
#pragma once

#include "engine/step_plan.h"
#include "kv/kv_cache.h"
#include "model/forward_model.h"

namespace specstack {

struct StepOutput {
  // [plan.logit_rows.size(), vocab] f32; with plan.tokens_on_device
  // [plan.host_rows.size(), vocab] (undefined when there are none).
  Tensor logits;
  // [plan.capture_rows.size(), n_layers, n_heads * head_dim] f32 (if asked)
  Tensor captured_queries;
  std::vector<int32_t> picked_tokens;  // [plan.logit_rows.size()] with plan.tokens_on_device
  // [plan.logit_rows.size()] with plan.top_logprobs: the picked tokens'
  // logprobs where plan.top_logprobs[row] >= 0 (other rows' stay empty).
  std::vector<RowLogprobs> logprobs;
  std::vector<VerifyOutcome> verified;  // [plan.verifications.size()]
  // With plan.follow_steps F (and R logit rows): picked_tokens is
  // [(1 + F) * R], step-major (step 0's rows, then each follow step's rows in
  // logit-row order), captured_queries (when asked) [(1 + F) * R, n_layers,
  // n_heads * head_dim] in the same order, and follow_ms the host time the
  // follow steps took after step 0's picks were back.
  double follow_ms = 0;
};

// Who picks the tokens of a step's logit rows (ModelRunner::picks_tokens).
enum class TokenPicking {
  kAuto,    // the model, where it runs on a device (logits would cross to the host)
  kAlways,  // also a host model's steps: the runner picks by the device's rule
            // (model/row_sampling.h), so the GPU's engine path runs without a GPU
  kNever,   // every row's logits come back and the engine's Sampler picks
            // (the path before device picking, for comparisons)
};

class ModelRunner {
 public:
  ModelRunner(ForwardModel& model, KvCache& kv, TokenPicking picking = TokenPicking::kAuto);

  StepOutput run(const StepPlan& plan);

  ForwardModel& model() { return model_; }
  const ForwardModel& model() const { return model_; }
  // Whether steps should let the model pick tokens (StepPlan::tokens_on_device):
  // worth it where logits would otherwise cross to the host (a GPU).
  bool picks_tokens() const {
    return picking_ == TokenPicking::kAlways ||
           (picking_ == TokenPicking::kAuto && model_.device() != Device::kCpu);
  }
  KvCache& kv() { return kv_; }
  // Whether a step of this runner can verify draft rows that `draft` kept
  // (StepPlan::verifications): both pick tokens, on the same device.
  bool verifies_drafts_of(const ModelRunner& draft) const {
    return picks_tokens() && draft.picks_tokens() && model_.device() == draft.model().device();
  }
  // The rows the last step kept (StepPlan::keep_rows): on the model's
  // device where the model picked the tokens, else here on the host.
  KeptRows kept_rows() const;

 private:
  // One step of the plan, follow steps aside.
  StepOutput run_step(const StepPlan& plan);
  // plan.follow_steps after step 0 (output holds step 0's picks): on the
  // model in one go where it can, else step by step here.
  void run_follow_steps(const StepPlan& plan, StepOutput& output);
  void check_plan(const StepPlan& plan) const;
  void check_follow_steps(const StepPlan& plan) const;
  // The model's view of the plan; results land in `output`.
  ForwardBatch make_batch(const StepPlan& plan, StepOutput& output) const;
  void check_masks(const StepPlan& plan) const;
  void pick_on_host(const StepPlan& plan, StepOutput& output);
  void verify_on_host(const StepPlan& plan, StepOutput& output) const;

  ForwardModel& model_;
  KvCache& kv_;
  TokenPicking picking_ = TokenPicking::kAuto;
  bool model_kept_rows_ = false;  // the last step's keep_rows were kept by the model
  bool model_picked_ = false;     // the model picked the last step's tokens itself
  std::vector<float> kept_host_;  // [kept rows, vocab] kept here when the runner picked
  int64_t n_kept_host_ = 0;
};

}  // namespace specstack

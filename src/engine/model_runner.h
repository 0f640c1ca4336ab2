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
};

class ModelRunner {
 public:
  // host_token_picking: a host model's steps may still be planned with
  // tokens_on_device (picks_tokens() is true); this runner then picks the
  // tokens by the device's rule (model/row_sampling.h), so the GPU's
  // engine path runs, and is tested, without a GPU.
  ModelRunner(ForwardModel& model, KvCache& kv, bool host_token_picking = false);

  StepOutput run(const StepPlan& plan);

  ForwardModel& model() { return model_; }
  // Whether steps should let the model pick tokens (StepPlan::tokens_on_device):
  // worth it where logits would otherwise cross to the host (a GPU).
  bool picks_tokens() const { return model_.device() != Device::kCpu || host_token_picking_; }
  KvCache& kv() { return kv_; }

 private:
  void check_plan(const StepPlan& plan) const;
  void check_masks(const StepPlan& plan) const;
  void pick_on_host(const StepPlan& plan, StepOutput& output) const;

  ForwardModel& model_;
  KvCache& kv_;
  bool host_token_picking_ = false;
};

}  // namespace specstack

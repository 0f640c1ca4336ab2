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
  Tensor logits;  // [plan.logit_rows.size(), vocab] f32
  Tensor captured_queries;
  std::vector<int32_t>
      greedy_tokens;  // [plan.logit_rows.size()] with plan.greedy_on_device  //
                      // [plan.capture_rows.size(), n_layers, n_heads * head_dim] f32 (if asked)
};

class ModelRunner {
 public:
  ModelRunner(ForwardModel& model, KvCache& kv);

  StepOutput run(const StepPlan& plan);

  ForwardModel& model() { return model_; }
  KvCache& kv() { return kv_; }

 private:
  void check_plan(const StepPlan& plan) const;
  void check_masks(const StepPlan& plan) const;

  ForwardModel& model_;
  KvCache& kv_;
};

}  // namespace specstack

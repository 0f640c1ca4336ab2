// A scenario for multi-step greedy decoding (StepPlan::follow_steps): one
// prefill step of several sequences (their last rows want logits and queries
// captured) and `follow` steps after it, either as follow steps of that one
// plan or planned one by one with the tokens picked before. Shared by the CPU
// and GPU tests. The pool must be whole again at the end.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "engine/model_instance.h"

namespace specstack::testing {

struct FollowRun {
  std::vector<int32_t> picks;   // step-major, [steps, sequences]
  std::vector<float> captured;  // [steps * sequences, n_layers, q_width]
};

inline FollowRun run_follow(ModelInstance& model, const std::vector<std::vector<int32_t>>& prompts,
                            int32_t follow, bool in_one_plan) {
  KvManager& kv = model.kv_manager();
  std::vector<KvSequence> seqs;
  StepPlan plan;
  plan.tokens_on_device = true;
  for (size_t s = 0; s < prompts.size(); ++s) {
    seqs.push_back(kv.new_sequence());
    const auto n = static_cast<int32_t>(prompts[s].size());
    const int32_t first = kv.append(seqs[s], n);
    for (int32_t i = 0; i < n; ++i) {
      const int32_t row =
          plan.add_token(prompts[s][size_t(i)], i, static_cast<int32_t>(s), first + i, i == n - 1);
      if (i == n - 1) plan.capture_rows.push_back(row);
    }
    plan.seq_n_slots.push_back(seqs[s].n_slots());
    if (in_one_plan) kv.append(seqs[s], follow);  // the follow steps' slots
    plan.block_tables.push_back(seqs[s].blocks());
  }
  plan.follow_steps = in_one_plan ? follow : 0;
  FollowRun run;
  StepOutput out = model.runner().run(plan);
  run.picks = out.picked_tokens;
  run.captured.assign(out.captured_queries.f32(),
                      out.captured_queries.f32() + out.captured_queries.numel());
  EXPECT_EQ(run.picks.size(), prompts.size() * size_t(in_one_plan ? 1 + follow : 1));
  for (int32_t j = 0; !in_one_plan && j < follow; ++j) {
    StepPlan step;
    step.tokens_on_device = true;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const int32_t slot = kv.append(seqs[s], 1);
      const auto position = static_cast<int32_t>(prompts[s].size()) + j;
      const int32_t token = run.picks[run.picks.size() - prompts.size() + s];
      step.capture_rows.push_back(
          step.add_token(token, position, static_cast<int32_t>(s), slot, true));
      step.block_tables.push_back(seqs[s].blocks());
      step.seq_n_slots.push_back(seqs[s].n_slots());
    }
    StepOutput next = model.runner().run(step);
    run.picks.insert(run.picks.end(), next.picked_tokens.begin(), next.picked_tokens.end());
    run.captured.insert(run.captured.end(), next.captured_queries.f32(),
                        next.captured_queries.f32() + next.captured_queries.numel());
  }
  for (KvSequence& seq : seqs) kv.free(seq);
  return run;
}

}  // namespace specstack::testing

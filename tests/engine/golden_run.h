// Running a golden model the way the reference was made: load its folder,
// prefill a prompt in chunks (explicit positions), then decode greedily.
// Shared by the CPU golden tests, the engine tests and the GPU golden tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_instance.h"
#include "golden_reference.h"
#include "test_util.h"

namespace specstack::testing {

// tests/data/golden/models/<name> as a ModelInstance; `options` supplies
// everything but the folder (KV size, device, ...).
inline std::unique_ptr<ModelInstance> load_golden_model(const std::string& name, Backend& backend,
                                                        ModelInstanceOptions options = {}) {
  options.model_dir = golden_model_dir(name);
  auto instance = ModelInstance::create(options, backend);
  SS_CHECK_MSG(instance.ok(), instance.ok() ? "" : instance.message());
  return std::move(instance).value();
}

struct GoldenRun {
  std::vector<float> prefill_logits;  // [n, vocab]
  std::vector<int32_t> greedy;
  std::vector<float> greedy_logits;  // [n_greedy, vocab], row 0 = last prefill row
};

// Prefills `ids` at `positions` in chunks of `chunk` tokens (logits of every
// token), then greedily decodes n_greedy tokens from position
// `next_position`; frees the sequence and expects the pool whole again.
inline GoldenRun prefill_then_greedy(ModelInstance& model, const std::vector<int32_t>& ids,
                                     const std::vector<int32_t>& positions, int32_t next_position,
                                     int n_greedy, int32_t chunk) {
  const int64_t vocab = model.config().vocab_size;
  KvManager& kv = model.kv_manager();
  KvSequence seq = kv.new_sequence(KvSequenceOptions{0, false});
  GoldenRun out;
  const auto n = static_cast<int32_t>(ids.size());
  for (int32_t begin = 0; begin < n; begin += chunk) {
    const int32_t end = std::min(n, begin + chunk);
    StepPlan plan;
    const int32_t first = kv.append(seq, end - begin);
    for (int32_t i = begin; i < end; ++i) {
      plan.add_token(ids[size_t(i)], positions[size_t(i)], 0, first + i - begin, true);
    }
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    StepOutput step = model.runner().run(plan);
    out.prefill_logits.insert(out.prefill_logits.end(), step.logits.f32(),
                              step.logits.f32() + step.logits.numel());
  }
  const float* last = out.prefill_logits.data() + (n - 1) * vocab;
  out.greedy_logits.assign(last, last + vocab);
  out.greedy.push_back(argmax(last, vocab));
  for (int j = 1; j < n_greedy; ++j) {
    StepPlan plan;
    const int32_t slot = kv.append(seq, 1);
    plan.add_token(out.greedy.back(), next_position + j - 1, 0, slot, true);
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    StepOutput step = model.runner().run(plan);
    out.greedy_logits.insert(out.greedy_logits.end(), step.logits.f32(), step.logits.f32() + vocab);
    out.greedy.push_back(argmax(step.logits.f32(), vocab));
  }
  kv.free(seq);
  EXPECT_EQ(model.pool().n_free(), model.pool().n_blocks());
  return out;
}

}  // namespace specstack::testing

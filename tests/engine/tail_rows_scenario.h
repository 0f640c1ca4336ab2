// A scenario for the last layer run for the logit rows alone (the CUDA
// model's StepMeta::tail_rows_only, the CPU Transformer's tail): the same
// steps once with only the rows a generation needs wanting logits and once
// with every row wanting them, so a test can compare the logits and the K/V
// (through the decode steps that follow). Shared by the CPU and GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine/model_instance.h"

namespace specstack::testing {

// What a tail scenario gives back: A's last prompt row's logits, B's decode
// rows' logits (one per A chunk), and A's forced decode steps' logits.
struct TailRun {
  std::vector<float> a_last, b_rows, a_decode;
};

// Sequence A prefills n_a tokens in chunks of `chunk` (flash jobs from 16
// rows, paged below); with_b, sequence B (a 20-token prompt first) decodes
// one row in the same step as each of A's chunks. Only A's last prompt row
// and B's rows want logits, or (every_row) every row does. Then A decodes
// four forced tokens. The pool must be whole again at the end.
inline TailRun run_tail_scenario(ModelInstance& model, int32_t n_a, int32_t chunk, bool with_b,
                                 bool every_row) {
  const int64_t vocab = model.config().vocab_size;
  auto token = [&](int32_t j) { return 3 + (j * 31 + 7) % int32_t(vocab - 3); };
  KvManager& kv = model.kv_manager();
  KvSequence a = kv.new_sequence(KvSequenceOptions{0, false});
  KvSequence b = kv.new_sequence(KvSequenceOptions{0, false});
  TailRun out;
  auto take_row = [&](const StepOutput& step, int32_t logit_index, std::vector<float>& dst) {
    const float* row = step.logits.f32() + int64_t(logit_index) * vocab;
    dst.insert(dst.end(), row, row + vocab);
  };
  int32_t b_len = 0;
  if (with_b) {
    StepPlan plan;
    const int32_t first = kv.append(b, 20);
    for (int32_t i = 0; i < 20; ++i) {
      plan.add_token(token(1000 + i), i, 0, first + i, every_row || i == 19);
    }
    plan.block_tables.push_back(b.blocks());
    plan.seq_n_slots.push_back(b.n_slots());
    model.runner().run(plan);
    b_len = 20;
  }
  for (int32_t begin = 0; begin < n_a; begin += chunk) {
    const int32_t end = std::min(n_a, begin + chunk);
    StepPlan plan;
    int32_t b_index = -1, a_index = -1, logit_rows = 0;
    if (with_b) {  // B's decode row first, then A's chunk: a mixed step
      const int32_t slot = kv.append(b, 1);
      plan.add_token(token(2000 + b_len), b_len, 1, slot, true);
      ++b_len;
      b_index = logit_rows++;
    }
    const int32_t first = kv.append(a, end - begin);
    for (int32_t i = begin; i < end; ++i) {
      const bool last = i == n_a - 1;
      plan.add_token(token(i), i, 0, first + i - begin, every_row || last);
      if (last) a_index = logit_rows;
      logit_rows += every_row || last;
    }
    plan.block_tables.push_back(a.blocks());
    plan.seq_n_slots.push_back(a.n_slots());
    if (with_b) {
      plan.block_tables.push_back(b.blocks());
      plan.seq_n_slots.push_back(b.n_slots());
    }
    StepOutput step = model.runner().run(plan);
    EXPECT_EQ(step.logits.size(0), logit_rows);
    if (b_index >= 0) take_row(step, b_index, out.b_rows);
    if (a_index >= 0) take_row(step, a_index, out.a_last);
  }
  for (int32_t j = 0; j < 4; ++j) {
    StepPlan plan;
    const int32_t slot = kv.append(a, 1);
    plan.add_token(token(5000 + j), n_a + j, 0, slot, true);
    plan.block_tables.push_back(a.blocks());
    plan.seq_n_slots.push_back(a.n_slots());
    StepOutput step = model.runner().run(plan);
    take_row(step, 0, out.a_decode);
  }
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(model.pool().n_free(), model.pool().n_blocks());
  return out;
}

}  // namespace specstack::testing

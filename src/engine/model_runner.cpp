#include "engine/model_runner.h"

#include <algorithm>
#include <span>

namespace specstack {

ModelRunner::ModelRunner(ForwardModel& model, KvCache& kv, TokenPicking picking)
    : model_(model), kv_(kv), picking_(picking) {}

void ModelRunner::check_plan(const StepPlan& plan) const {
  const size_t n = plan.token_ids.size();
  SS_CHECK_EQ(plan.positions.size(), n);
  SS_CHECK_EQ(plan.seq_index.size(), n);
  SS_CHECK_EQ(plan.slots.size(), n);
  SS_CHECK_EQ(plan.seq_n_slots.size(), plan.block_tables.size());
  const int64_t block_size = kv_.shape().block_size;
  const int64_t vocab = model_.config().vocab_size;
  for (size_t t = 0; t < n; ++t) {
    SS_CHECK_LE(0, plan.token_ids[t]);
    SS_CHECK_LT(plan.token_ids[t], vocab);
    SS_CHECK_LE(0, plan.positions[t]);
    const int32_t seq = plan.seq_index[t];
    SS_CHECK_LE(0, seq);
    SS_CHECK_LT(seq, static_cast<int32_t>(plan.block_tables.size()));
    SS_CHECK_LE(0, plan.slots[t]);
    SS_CHECK_LT(plan.slots[t], plan.seq_n_slots[static_cast<size_t>(seq)]);
  }
  for (size_t s = 0; s < plan.block_tables.size(); ++s) {
    const int64_t needed = (plan.seq_n_slots[s] + block_size - 1) / block_size;
    SS_CHECK_LE(needed, static_cast<int64_t>(plan.block_tables[s].size()));
    for (int32_t block : plan.block_tables[s]) {
      SS_CHECK_LE(0, block);
      SS_CHECK_LT(block, kv_.shape().n_blocks);
    }
  }
  if (!plan.fill_masks) check_masks(plan);
  if (plan.tokens_on_device) {
    SS_CHECK(plan.sampling.empty() || plan.sampling.size() == plan.logit_rows.size());
    SS_CHECK(plan.top_logprobs.empty() || plan.top_logprobs.size() == plan.logit_rows.size());
    for (size_t i = 0; i < plan.host_rows.size(); ++i) {
      SS_CHECK_LE(0, plan.host_rows[i]);
      SS_CHECK_LT(plan.host_rows[i], static_cast<int32_t>(plan.logit_rows.size()));
      if (i > 0) SS_CHECK_LT(plan.host_rows[i - 1], plan.host_rows[i]);
    }
  } else {
    SS_CHECK(plan.sampling.empty() && plan.host_rows.empty() && plan.top_logprobs.empty());
  }
  for (size_t i = 1; i < plan.logit_rows.size(); ++i) {
    SS_CHECK_LT(plan.logit_rows[i - 1], plan.logit_rows[i]);
  }
  for (size_t i = 0; i < plan.capture_rows.size(); ++i) {
    SS_CHECK_LT(plan.capture_rows[i], static_cast<int32_t>(n));
    if (i > 0) SS_CHECK_LT(plan.capture_rows[i - 1], plan.capture_rows[i]);
  }
}

void ModelRunner::check_masks(const StepPlan& plan) const {
  if (plan.masks.empty()) return;
  SS_CHECK(plan.tokens_on_device);  // a host-sampled step masks its logits itself
  SS_CHECK_EQ(plan.masks.row_mask.size(), plan.logit_rows.size());
  SS_CHECK_EQ(int64_t{plan.masks.words_per_row}, (model_.config().vocab_size + 31) / 32);
  for (int32_t m : plan.masks.row_mask) SS_CHECK_LT(m, plan.masks.n_masks());
}

StepOutput ModelRunner::run(const StepPlan& plan) {
  check_plan(plan);
  ForwardBatch batch;
  batch.token_ids = plan.token_ids;
  batch.attention.token_seq = plan.seq_index;
  batch.attention.token_slot = plan.slots;
  batch.attention.token_pos = plan.positions;
  for (const auto& table : plan.block_tables) batch.attention.block_tables.emplace_back(table);
  batch.attention.seq_n_slots = plan.seq_n_slots;
  batch.logit_rows = plan.logit_rows;
  batch.capture_rows = plan.capture_rows;
  StepOutput output;
  if (!plan.capture_rows.empty()) batch.captured_queries = &output.captured_queries;
  SS_CHECK(!plan.fill_masks || plan.tokens_on_device);
  // plan.fill_masks, once (the model calls it after queuing the forward; a
  // host model never does, so it runs after forward returns).
  bool masks_ready = !plan.fill_masks;
  const std::function<void()> prepare_masks = [&] {
    if (masks_ready) return;
    masks_ready = true;
    plan.fill_masks();
    check_masks(plan);
  };
  if (plan.tokens_on_device) {
    batch.picked_tokens = &output.picked_tokens;
    batch.sampling = plan.sampling;
    batch.host_rows = plan.host_rows;
    batch.top_logprobs = plan.top_logprobs;
    batch.logprobs = &output.logprobs;
    batch.masks = &plan.masks;
    batch.prepare_masks = &prepare_masks;
  }
  model_.forward(batch, kv_, output.logits);
  prepare_masks();
  if (plan.tokens_on_device && output.picked_tokens.empty() && !plan.logit_rows.empty()) {
    pick_on_host(plan, output);
  }
  return output;
}

void ModelRunner::pick_on_host(const StepPlan& plan, StepOutput& output) const {
  // The model returned every row's logits [logit_rows, vocab]: pick by the
  // device's rule, then keep only the host rows' logits.
  const int64_t vocab = output.logits.size(1);
  const size_t n_rows = plan.logit_rows.size();
  output.picked_tokens.resize(n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    const RowSampling sampling = plan.sampling.empty() ? RowSampling{} : plan.sampling[r];
    const float* row = output.logits.f32() + static_cast<int64_t>(r) * vocab;
    output.picked_tokens[r] = sample_row(row, vocab, sampling, &plan.masks, r);
  }
  if (!plan.top_logprobs.empty()) {
    output.logprobs.assign(n_rows, RowLogprobs{});
    for (size_t r = 0; r < n_rows; ++r) {
      if (plan.top_logprobs[r] < 0) continue;
      output.logprobs[r] = row_logprobs(output.logits.f32() + static_cast<int64_t>(r) * vocab,
                                        vocab, output.picked_tokens[r], plan.top_logprobs[r]);
    }
  }
  if (plan.host_rows.empty()) {
    output.logits = Tensor();
    return;
  }
  Tensor host = Tensor::zeros(DType::kF32, {static_cast<int64_t>(plan.host_rows.size()), vocab});
  for (size_t i = 0; i < plan.host_rows.size(); ++i) {
    const float* from = output.logits.f32() + int64_t{plan.host_rows[i]} * vocab;
    std::copy(from, from + vocab, host.f32() + static_cast<int64_t>(i) * vocab);
  }
  output.logits = std::move(host);
}

}  // namespace specstack

#include "engine/model_runner.h"

#include <algorithm>
#include <chrono>
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
    SS_CHECK(plan.keep_rows.empty() || plan.keep_rows.size() == plan.logit_rows.size());
    for (const RowVerification& v : plan.verifications) {
      const auto k = static_cast<int32_t>(v.draft_tokens.size());
      SS_CHECK_GE(k, 1);
      SS_CHECK_EQ(v.uniforms.size(), static_cast<size_t>(k + 1));
      SS_CHECK_LE(0, v.first_row);
      SS_CHECK_LE(v.first_row + k, static_cast<int32_t>(plan.logit_rows.size()) - 1);
      SS_CHECK_LE(0, v.first_kept_row);
      SS_CHECK_LE(int64_t{v.first_kept_row} + k, plan.draft_rows.n_rows);
      for (int32_t token : v.draft_tokens) {
        SS_CHECK_LE(0, token);
        SS_CHECK_LT(token, vocab);
      }
    }
    if (!plan.verifications.empty()) {
      SS_CHECK(plan.draft_rows.data != nullptr);
      SS_CHECK_LE(plan.draft_rows.vocab, vocab);
      SS_CHECK_EQ(plan.draft_rows.on_device, model_.device() != Device::kCpu);
    }
  } else {
    SS_CHECK(plan.sampling.empty() && plan.host_rows.empty() && plan.top_logprobs.empty() &&
             plan.keep_rows.empty() && plan.verifications.empty());
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

void ModelRunner::check_follow_steps(const StepPlan& plan) const {
  if (plan.follow_steps == 0) return;
  SS_CHECK_GT(plan.follow_steps, 0);
  SS_CHECK(plan.tokens_on_device);
  SS_CHECK(plan.sampling.empty() && plan.top_logprobs.empty() && plan.host_rows.empty() &&
           plan.masks.empty() && !plan.fill_masks && plan.keep_rows.empty() &&
           plan.verifications.empty());
  SS_CHECK(plan.capture_rows.empty() || plan.capture_rows == plan.logit_rows);
  const int64_t block_size = kv_.shape().block_size;
  std::vector<char> seen(plan.block_tables.size(), 0);
  for (int32_t row : plan.logit_rows) {
    const auto seq = static_cast<size_t>(plan.seq_index[static_cast<size_t>(row)]);
    SS_CHECK(!seen[seq]);
    seen[seq] = 1;
    SS_CHECK_EQ(plan.slots[static_cast<size_t>(row)], plan.seq_n_slots[seq] - 1);
    const int64_t slots = int64_t{plan.seq_n_slots[seq]} + plan.follow_steps;
    SS_CHECK_LE((slots + block_size - 1) / block_size,
                static_cast<int64_t>(plan.block_tables[seq].size()));
  }
}

StepOutput ModelRunner::run(const StepPlan& plan) {
  check_follow_steps(plan);
  StepOutput output = run_step(plan);
  if (plan.follow_steps > 0) run_follow_steps(plan, output);
  return output;
}

void ModelRunner::run_follow_steps(const StepPlan& plan, StepOutput& output) {
  const auto start = std::chrono::steady_clock::now();
  const size_t rows = plan.logit_rows.size();
  const auto n_follow = static_cast<size_t>(plan.follow_steps);
  const bool capture = !plan.capture_rows.empty();
  SS_CHECK_EQ(output.picked_tokens.size(), rows);
  // Follow step j's row i continues logit row i's sequence one slot further.
  std::vector<StepPlan> steps(n_follow);
  for (size_t j = 0; j < n_follow; ++j) {
    StepPlan& step = steps[j];
    step.tokens_on_device = true;
    const auto ahead = static_cast<int32_t>(j + 1);
    for (size_t i = 0; i < rows; ++i) {
      const auto row = static_cast<size_t>(plan.logit_rows[i]);
      const auto seq = static_cast<size_t>(plan.seq_index[row]);
      const int32_t slot = plan.slots[row] + ahead;
      step.add_token(0, plan.positions[row] + ahead, static_cast<int32_t>(i), slot, true);
      if (capture) step.capture_rows.push_back(static_cast<int32_t>(i));
      step.block_tables.push_back(plan.block_tables[seq]);
      step.seq_n_slots.push_back(slot + 1);
    }
  }
  std::vector<StepOutput> outputs(n_follow);
  bool on_model = model_picked_;  // the model holds step 0's picks
  if (on_model) {
    std::vector<ForwardBatch> batches;
    batches.reserve(n_follow);
    for (size_t j = 0; j < n_follow; ++j) {
      check_plan(steps[j]);
      batches.push_back(make_batch(steps[j], outputs[j]));
    }
    on_model = model_.forward_follow(batches, kv_);
  }
  if (!on_model) {
    const std::vector<int32_t>* previous = &output.picked_tokens;
    for (size_t j = 0; j < n_follow; ++j) {
      std::copy(previous->begin(), previous->end(), steps[j].token_ids.begin());
      outputs[j] = run_step(steps[j]);
      previous = &outputs[j].picked_tokens;
    }
  }
  for (const StepOutput& step : outputs) {
    SS_CHECK_EQ(step.picked_tokens.size(), rows);
    output.picked_tokens.insert(output.picked_tokens.end(), step.picked_tokens.begin(),
                                step.picked_tokens.end());
  }
  if (capture) {
    const int64_t row_floats = output.captured_queries.numel() / static_cast<int64_t>(rows);
    Tensor all = Tensor::zeros(
        DType::kF32, {static_cast<int64_t>((1 + n_follow) * rows), output.captured_queries.size(1),
                      output.captured_queries.size(2)});
    float* to =
        std::copy_n(output.captured_queries.f32(), output.captured_queries.numel(), all.f32());
    for (const StepOutput& step : outputs) {
      SS_CHECK_EQ(step.captured_queries.numel(), static_cast<int64_t>(rows) * row_floats);
      to = std::copy_n(step.captured_queries.f32(), step.captured_queries.numel(), to);
    }
    output.captured_queries = std::move(all);
  }
  output.follow_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

ForwardBatch ModelRunner::make_batch(const StepPlan& plan, StepOutput& output) const {
  ForwardBatch batch;
  batch.token_ids = plan.token_ids;
  batch.attention.token_seq = plan.seq_index;
  batch.attention.token_slot = plan.slots;
  batch.attention.token_pos = plan.positions;
  for (const auto& table : plan.block_tables) batch.attention.block_tables.emplace_back(table);
  batch.attention.seq_n_slots = plan.seq_n_slots;
  batch.logit_rows = plan.logit_rows;
  batch.capture_rows = plan.capture_rows;
  if (!plan.capture_rows.empty()) batch.captured_queries = &output.captured_queries;
  if (plan.tokens_on_device) {
    batch.picked_tokens = &output.picked_tokens;
    batch.sampling = plan.sampling;
    batch.host_rows = plan.host_rows;
    batch.top_logprobs = plan.top_logprobs;
    batch.logprobs = &output.logprobs;
    batch.masks = &plan.masks;
    batch.keep_rows = plan.keep_rows;
    batch.verifications = plan.verifications;
    batch.draft_rows = plan.draft_rows;
    batch.verified = &output.verified;
  }
  return batch;
}

StepOutput ModelRunner::run_step(const StepPlan& plan) {
  check_plan(plan);
  StepOutput output;
  ForwardBatch batch = make_batch(plan, output);
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
  if (plan.tokens_on_device) batch.prepare_masks = &prepare_masks;
  model_.forward(batch, kv_, output.logits);
  prepare_masks();
  model_picked_ = !output.picked_tokens.empty();
  // Who holds this step's kept rows: the model when it picked the tokens.
  if (!plan.keep_rows.empty()) model_kept_rows_ = model_picked_;
  if (plan.tokens_on_device && output.picked_tokens.empty() && !plan.logit_rows.empty()) {
    pick_on_host(plan, output);
  }
  return output;
}

KeptRows ModelRunner::kept_rows() const {
  if (model_kept_rows_) return model_.kept_rows();
  KeptRows rows;
  rows.data = kept_host_.data();
  rows.n_rows = n_kept_host_;
  rows.vocab = model_.config().vocab_size;
  return rows;
}

void ModelRunner::verify_on_host(const StepPlan& plan, StepOutput& output) const {
  // output.logits holds every logit row [logit_rows, vocab]; the draft's
  // kept rows are on the host (check_plan: same device kind as this model).
  const int64_t vocab = output.logits.size(1);
  const KeptRows& draft = plan.draft_rows;
  output.verified.clear();
  for (const RowVerification& v : plan.verifications) {
    const VerifyOutcome o =
        verify_rows(output.logits.f32() + int64_t{v.first_row} * vocab, vocab,
                    draft.data + v.first_kept_row * draft.vocab, draft.vocab, v);
    output.verified.push_back(o);
    // The chunk's rows pick the emitted tokens (their logprobs follow).
    for (int32_t i = 0; i <= o.n_accepted; ++i) {
      output.picked_tokens[size_t(v.first_row + i)] =
          i < o.n_accepted ? v.draft_tokens[size_t(i)] : o.next_token;
    }
  }
}

void ModelRunner::pick_on_host(const StepPlan& plan, StepOutput& output) {
  // The model returned every row's logits [logit_rows, vocab]: pick by the
  // device's rule, keep and verify what the plan asks, then keep only the
  // host rows' logits.
  const int64_t vocab = output.logits.size(1);
  const size_t n_rows = plan.logit_rows.size();
  if (!plan.keep_rows.empty()) {
    // Grows only: a draft keeps the rows of its k forwards in one round.
    int64_t n_kept = n_kept_host_;
    for (int32_t k : plan.keep_rows) n_kept = std::max<int64_t>(n_kept, int64_t{k} + 1);
    kept_host_.resize(static_cast<size_t>(n_kept * vocab));
    n_kept_host_ = n_kept;
    for (size_t r = 0; r < n_rows; ++r) {
      if (plan.keep_rows[r] < 0) continue;
      const float* from = output.logits.f32() + static_cast<int64_t>(r) * vocab;
      std::copy(from, from + vocab, kept_host_.data() + int64_t{plan.keep_rows[r]} * vocab);
    }
  }
  output.picked_tokens.resize(n_rows);
  for (size_t r = 0; r < n_rows; ++r) {
    const RowSampling sampling = plan.sampling.empty() ? RowSampling{} : plan.sampling[r];
    const float* row = output.logits.f32() + static_cast<int64_t>(r) * vocab;
    output.picked_tokens[r] = sample_row(row, vocab, sampling, &plan.masks, r);
  }
  if (!plan.verifications.empty()) verify_on_host(plan, output);  // re-picks their rows
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

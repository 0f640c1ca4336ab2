// The speculative-prefill scoring path on a real draft forward pass: our
// model runner captures post-RoPE queries (last prompt token + 7 greedy
// lookahead steps), the prompt keys are read back from the paged KV cache, and
// the scorer and selector reproduce the HF reference importance and kept
// chunks for llama-gqa (tests/data/golden, "score.*").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "engine/model_instance.h"
#include "golden_reference.h"
#include "specprefill/attention_capture.h"
#include "specprefill/prompt_keys.h"
#include "specprefill/scorer.h"
#include "specprefill/selector.h"
#include "test_util.h"

namespace specstack {
namespace {

TEST(SpecPrefillCapture, DraftForwardReproducesReferenceQueriesKeysAndImportance) {
  CpuBackend backend(CpuBackendOptions{2});
  ModelInstanceOptions options;
  options.model_dir = testing::golden_model_dir("llama-gqa");
  options.kv_tokens = 1024;
  auto created = ModelInstance::create(options, backend);
  ASSERT_TRUE(created.ok()) << created.message();
  ModelInstance& draft = **created;
  const ModelConfig& config = draft.config();
  testing::GoldenReference ref(options.model_dir + "/reference.safetensors");
  const std::vector<int32_t> prompt = ref.ids("p2.input_ids");
  const auto m = static_cast<int32_t>(prompt.size());  // 333
  constexpr int64_t kSteps = 8;
  const int64_t q_width = config.n_heads * config.head_dim;

  KvManager& kv = draft.kv_manager();
  KvSequence seq = kv.new_sequence(KvSequenceOptions{0, false});
  AttentionCapture capture =
      AttentionCapture::zeros(config.n_layers, kSteps, config.n_heads, config.head_dim);
  capture.layer_window.assign(static_cast<size_t>(config.n_layers), 0);
  auto store = [&](const Tensor& captured, int64_t row, int64_t step) {
    for (int64_t l = 0; l < config.n_layers; ++l) {
      std::copy_n(captured.f32() + (row * config.n_layers + l) * q_width, q_width, capture.query(l, step));
    }
  };

  // Draft prefill in chunks; the last prompt token's queries are step 0.
  std::vector<int32_t> lookahead;
  for (int32_t begin = 0; begin < m; begin += 128) {
    const int32_t end = std::min(m, begin + 128);
    StepPlan plan;
    const int32_t first = kv.append(seq, end - begin);
    for (int32_t i = begin; i < end; ++i) plan.add_token(prompt[i], i, 0, first + i - begin, i == m - 1);
    if (end == m) plan.capture_rows.push_back(end - 1 - begin);
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    StepOutput out = draft.runner().run(plan);
    if (end == m) {
      ASSERT_EQ(out.captured_queries.shape(), (std::vector<int64_t>{1, config.n_layers, q_width}));
      store(out.captured_queries, 0, 0);
      lookahead.push_back(testing::argmax(out.logits.f32(), config.vocab_size));
    }
  }
  // Lookahead: greedy tokens fed back at positions M, M+1, ...; their queries are steps 1..7.
  for (int64_t step = 1; step < kSteps; ++step) {
    StepPlan plan;
    const int32_t slot = kv.append(seq, 1);
    plan.add_token(lookahead.back(), m + static_cast<int32_t>(step) - 1, 0, slot, true);
    plan.capture_rows.push_back(0);
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    StepOutput out = draft.runner().run(plan);
    store(out.captured_queries, 0, step);
    lookahead.push_back(testing::argmax(out.logits.f32(), config.vocab_size));
  }
  EXPECT_EQ(lookahead, ref.ids("score.lookahead_tokens"));

  // Queries: reference [layers, steps, H, D].
  const Tensor& ref_queries = ref.get("score.queries");
  ASSERT_EQ(ref_queries.numel(), static_cast<int64_t>(capture.queries.size()));
  EXPECT_LE(testing::relative_error(capture.queries.data(), ref_queries.f32(), ref_queries.numel()), 1e-5);

  // Keys: only the M prompt slots, read through the block table; reference [layers, Hkv, M, D].
  auto keys = PagedPromptKeys::make(draft.kv(), seq.blocks(), 0, m);
  ASSERT_TRUE(keys.ok()) << keys.message();
  const Tensor& ref_keys = ref.get("score.keys");
  std::vector<float> ours(static_cast<size_t>(ref_keys.numel()));
  const int64_t per_head = static_cast<int64_t>(m) * config.head_dim;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    for (int64_t g = 0; g < config.n_kv_heads; ++g) {
      keys->copy_keys(l, g, 0, m, ours.data() + (l * config.n_kv_heads + g) * per_head);
    }
  }
  EXPECT_LE(testing::relative_error(ours.data(), ref_keys.f32(), ref_keys.numel()), 1e-5);

  // Importance and the kept chunks.
  auto importance = score_tokens(capture, *keys, ScoreParams{13, &backend.pool()});
  ASSERT_TRUE(importance.ok()) << importance.message();
  const Tensor& ref_importance = ref.get("score.importance");
  ASSERT_EQ(static_cast<int64_t>(importance->size()), ref_importance.numel());
  EXPECT_LE(testing::relative_error(importance->data(), ref_importance.f32(), ref_importance.numel()), 1e-5);
  SelectionOptions select;
  select.keep_pct = 0.2;
  select.force_first_last = false;
  auto selection = select_chunks(*importance, select);
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->kept_chunks, ref.ids("score.kept_chunks"));
  EXPECT_EQ(selection->kept_positions, ref.ids("score.kept"));
  select.force_first_last = true;
  selection = select_chunks(*importance, select);
  ASSERT_TRUE(selection.ok());
  EXPECT_EQ(selection->kept_chunks, ref.ids("score.kept_chunks_union_first_last"));

  // After scoring the draft's lookahead KV is dropped: the prompt slots remain.
  kv.rollback(seq, kSteps - 1);
  EXPECT_EQ(seq.n_slots(), m);
  kv.free(seq);
  EXPECT_EQ(draft.pool().n_free(), draft.pool().n_blocks());
}

}  // namespace
}  // namespace specstack

// One step may mix several sequences' prefill chunks and decode tokens, in
// any row order, with interleaved block tables: the logits must equal those
// of running each sequence alone.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "follow_steps_scenario.h"
#include "golden_reference.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::argmax;
using testing::relative_error;

constexpr double kBatchTolerance = 1e-5;  // summation order differs between batch shapes

std::unique_ptr<ModelInstance> load(const std::string& name, Backend& backend) {
  ModelInstanceOptions options;
  options.model_dir = testing::golden_model_dir(name);
  options.kv_tokens = 2048;
  auto instance = ModelInstance::create(options, backend);
  SS_CHECK_MSG(instance.ok(), instance.ok() ? "" : instance.message());
  return std::move(instance).value();
}

std::vector<int32_t> prompt_of(const std::string& model, const std::string& p) {
  testing::GoldenReference ref(testing::golden_model_dir(model) + "/reference.safetensors");
  return ref.ids(p + ".input_ids");
}

// A sequence being fed step by step: prompt chunks, then greedy tokens.
struct Feed {
  std::vector<int32_t> prompt;
  KvSequence kv;
  int32_t fed = 0;                         // prompt tokens fed
  int32_t next_token = -1;                 // greedy token to feed next (after the prompt)
  std::vector<std::vector<float>> logits;  // every logits row produced, in order
};

// Runs one step in which each feed contributes `counts[i]` tokens (prompt
// chunk or one decode token). `interleave` alternates rows between feeds.
void step(ModelInstance& model, std::vector<Feed*> feeds, const std::vector<int32_t>& counts,
          bool interleave) {
  StepPlan plan;
  struct Pending {
    int32_t seq, id, pos, slot;
    bool logits;
  };
  std::vector<std::vector<Pending>> per_feed(feeds.size());
  for (size_t i = 0; i < feeds.size(); ++i) {
    Feed& f = *feeds[i];
    const int32_t n = counts[i];
    const int32_t first = model.kv_manager().append(f.kv, n);
    for (int32_t j = 0; j < n; ++j) {
      const bool in_prompt = f.fed < static_cast<int32_t>(f.prompt.size());
      const int32_t id = in_prompt ? f.prompt[f.fed] : f.next_token;
      const int32_t pos = first + j;  // dense positions here
      const bool last_of_prompt = in_prompt && f.fed == static_cast<int32_t>(f.prompt.size()) - 1;
      per_feed[i].push_back(
          {static_cast<int32_t>(i), id, pos, first + j, last_of_prompt || !in_prompt});
      if (in_prompt) ++f.fed;
    }
    plan.block_tables.push_back(f.kv.blocks());
    plan.seq_n_slots.push_back(f.kv.n_slots());
  }
  // Row order: either feed by feed, or round-robin across feeds.
  std::vector<Pending> rows;
  if (interleave) {
    for (size_t k = 0;; ++k) {
      bool any = false;
      for (auto& list : per_feed) {
        if (k < list.size()) rows.push_back(list[k]), any = true;
      }
      if (!any) break;
    }
  } else {
    for (auto& list : per_feed) rows.insert(rows.end(), list.begin(), list.end());
  }
  for (const Pending& r : rows) plan.add_token(r.id, r.pos, r.seq, r.slot, r.logits);
  StepOutput out = model.runner().run(plan);
  const int64_t vocab = out.logits.size(1);
  size_t logit_index = 0;
  for (const Pending& r : rows) {
    if (!r.logits) continue;
    Feed& f = *feeds[static_cast<size_t>(r.seq)];
    const float* row = out.logits.f32() + static_cast<int64_t>(logit_index++) * vocab;
    f.logits.emplace_back(row, row + vocab);
    f.next_token = argmax(row, vocab);
  }
}

void expect_same_logits(const Feed& solo, const Feed& mixed) {
  ASSERT_EQ(solo.logits.size(), mixed.logits.size());
  for (size_t r = 0; r < solo.logits.size(); ++r) {
    const int64_t vocab = static_cast<int64_t>(solo.logits[r].size());
    EXPECT_LE(relative_error(mixed.logits[r].data(), solo.logits[r].data(), vocab), kBatchTolerance)
        << "row " << r;
    EXPECT_EQ(argmax(mixed.logits[r].data(), vocab), argmax(solo.logits[r].data(), vocab))
        << "row " << r;
  }
}

class MixedBatchTest : public ::testing::TestWithParam<bool> {};

TEST_P(MixedBatchTest, PrefillChunksAndDecodesInOneStepMatchSoloRuns) {
  const bool interleave = GetParam();
  for (const char* name : {"llama-gqa", "mistral-swa", "qwen3-moe"}) {
    SCOPED_TRACE(name);
    CpuBackend backend(CpuBackendOptions{2});
    auto model = load(name, backend);
    const auto short_prompt = prompt_of(name, "p1");  // 64 tokens
    const auto long_prompt = prompt_of(name, "p2");   // 333 tokens

    // Solo: A prefilled at once then 6 decodes; B prefilled at once then 3 decodes.
    Feed solo_a{short_prompt, model->kv_manager().new_sequence(), 0, -1, {}},
        solo_b{long_prompt, model->kv_manager().new_sequence(), 0, -1, {}};
    step(*model, {&solo_a}, {64}, false);
    for (int i = 0; i < 6; ++i) step(*model, {&solo_a}, {1}, false);
    step(*model, {&solo_b}, {333}, false);
    for (int i = 0; i < 3; ++i) step(*model, {&solo_b}, {1}, false);
    model->kv_manager().free(solo_a.kv);
    model->kv_manager().free(solo_b.kv);

    // Mixed: B's prompt arrives in chunks while A prefills and then decodes.
    Feed a{short_prompt, model->kv_manager().new_sequence(), 0, -1, {}},
        b{long_prompt, model->kv_manager().new_sequence(), 0, -1, {}};
    step(*model, {&a, &b}, {64, 100}, interleave);
    step(*model, {&a, &b}, {1, 150}, interleave);
    step(*model, {&b, &a}, {83, 1}, interleave);  // B's last chunk; order of sequences swapped
    for (int i = 0; i < 3; ++i) step(*model, {&a, &b}, {1, 1}, interleave);
    step(*model, {&a}, {1}, interleave);
    expect_same_logits(solo_a, a);
    expect_same_logits(solo_b, b);
    model->kv_manager().free(a.kv);
    model->kv_manager().free(b.kv);
    EXPECT_EQ(model->pool().n_free(), model->pool().n_blocks());
  }
}

INSTANTIATE_TEST_SUITE_P(RowOrder, MixedBatchTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "interleaved" : "grouped"; });

// Multi-step greedy decoding (StepPlan::follow_steps): a prefill step of two
// sequences (different lengths, queries captured) followed by four steps in
// the same plan equals the prefill step and four single-token steps planned
// one by one with the tokens picked before: the same tokens, the same queries.
TEST(ModelRunner, FollowStepsEqualStepsPlannedOneByOne) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("llama-gqa", backend);
  const std::vector<std::vector<int32_t>> prompts = {prompt_of("llama-gqa", "p0"),
                                                     prompt_of("llama-gqa", "p1")};
  ASSERT_NE(prompts[0].size(), prompts[1].size());
  const testing::FollowRun together = testing::run_follow(*model, prompts, 4, true);
  const testing::FollowRun apart = testing::run_follow(*model, prompts, 4, false);
  ASSERT_EQ(together.picks.size(), 10u);
  EXPECT_EQ(together.picks, apart.picks);
  const int64_t row_floats =
      model->config().n_layers * model->config().n_heads * model->config().head_dim;
  ASSERT_EQ(together.captured.size(), size_t(10 * row_floats));
  EXPECT_EQ(together.captured, apart.captured);
  EXPECT_EQ(model->pool().n_free(), model->pool().n_blocks());
}

// A plan the follow steps cannot continue is a scheduler bug: a check failure.
TEST(ModelRunnerDeathTest, FollowStepsNeedTheirSlotsAndArgmaxRows) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CpuBackend backend(CpuBackendOptions{1});
  auto model = load("llama-gqa", backend);
  KvManager& kv = model->kv_manager();
  KvSequence seq = kv.new_sequence();
  const int32_t first = kv.append(seq, 16);  // one block: no room past slot 15
  StepPlan plan;
  plan.tokens_on_device = true;
  for (int32_t i = 0; i < 16; ++i) plan.add_token(5 + i, i, 0, first + i, i == 15);
  plan.block_tables.push_back(seq.blocks());
  plan.seq_n_slots.push_back(seq.n_slots());
  plan.follow_steps = 2;
  EXPECT_DEATH(model->runner().run(plan), "model_runner.cpp.*block_size");
  plan.follow_steps = 0;
  plan.sampling.push_back(RowSampling{});
  plan.sampling.back().temperature = 0.7f;
  plan.follow_steps = 1;
  kv.append(seq, 1);
  plan.block_tables.back() = seq.blocks();
  EXPECT_DEATH(model->runner().run(plan), "model_runner.cpp.*plan.sampling.empty");
  kv.free(seq);
}

TEST(Generator, BatchedGenerationEqualsOneRequestAtATime) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("qwen2", backend);
  std::vector<GenerationRequest> requests(3);
  const char* prompts[] = {"p0", "p1", "p2"};
  for (size_t i = 0; i < 3; ++i) {
    requests[i].prompt = prompt_of("qwen2", prompts[i]);
    requests[i].params.temperature = 0;
    requests[i].params.max_tokens = 12;
    requests[i].params.ignore_eos = true;
  }
  GeneratorOptions options;
  options.max_batched_tokens = 96;  // forces chunks that span sequences
  Generator generator(model->runner(), model->kv_manager(), options);
  auto together = generator.generate(requests);
  ASSERT_TRUE(together.ok()) << together.message();
  for (size_t i = 0; i < 3; ++i) {
    auto alone = generator.generate({requests[i]});
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ((*together)[i].tokens, (*alone)[0].tokens) << "request " << i;
    EXPECT_EQ((*together)[i].tokens.size(), 12u);
    EXPECT_EQ((*together)[i].finish_reason, FinishReason::kFinishLength);
  }
  EXPECT_EQ(model->pool().n_free(), model->pool().n_blocks());
}

TEST(Generator, RejectsBadRequestsWithoutLeakingBlocks) {
  CpuBackend backend(CpuBackendOptions{1});
  auto model = load("llama-gqa", backend);
  Generator generator(model->runner(), model->kv_manager());
  GenerationRequest empty;
  auto result = generator.generate({empty});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("empty prompt"), std::string::npos);
  GenerationRequest out_of_range;
  out_of_range.prompt = {5, 512};
  result = generator.generate({out_of_range});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("512"), std::string::npos);
  GenerationRequest too_long;
  too_long.prompt = {5, 6};
  too_long.params.max_tokens = 100000;
  result = generator.generate({too_long});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.message().find("KV blocks"), std::string::npos);
  EXPECT_EQ(model->pool().n_free(), model->pool().n_blocks());
}

}  // namespace
}  // namespace specstack

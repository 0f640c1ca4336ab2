// Speculative prefill inside the serving engine: draft scoring as scheduled
// draft steps, the target's sparse prefill at original positions, decode from
// position M, fallbacks, the threshold and per-request overrides, and both KV
// pools fully free afterwards.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "engine/scheduler.h"
#include "engine/specprefill_stage.h"
#include "engine_test_util.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "test_util.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<ModelInstance> load(Backend& backend, int64_t kv_tokens,
                                    DType kv_dtype = DType::kF32) {
  ModelInstanceOptions options;
  options.kv_tokens = kv_tokens;
  options.kv_dtype = kv_dtype;
  return testing::load_golden_model("llama-gqa", backend, options);
}

std::vector<int32_t> golden_ids(const std::string& name) {
  testing::GoldenReference ref(testing::golden_model_dir("llama-gqa") + "/reference.safetensors");
  return ref.ids(name);
}

using testing::greedy;

std::vector<int32_t> run(Engine& engine, RequestOptions options, RequestStats* stats = nullptr) {
  auto stream = engine.submit(std::move(options));
  SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
  std::vector<int32_t> tokens;
  while (!(*stream)->done()) {
    auto event = (*stream)->next(5000ms);
    if (event) tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
  }
  if (stats != nullptr) *stats = (*stream)->stats();
  return tokens;
}

std::vector<int32_t> offline(ModelInstance& model, std::vector<int32_t> prompt,
                             std::vector<int32_t> positions, int32_t max_tokens) {
  Generator generator(model.runner(), model.kv_manager());
  auto result = generator.generate(
      {GenerationRequest{std::move(prompt), std::move(positions), greedy(max_tokens)}});
  SS_CHECK(result.ok());
  return (*result)[0].tokens;
}

// The SpecPrefill draft's pool is its own ModelInstance's (not the engine's
// speculative-decoding draft pool the drained check reads).
void expect_pools_free(const Engine& engine, const ModelInstance& draft) {
  testing::expect_engine_drained(engine);
  EXPECT_EQ(draft.pool().n_free(), draft.pool().n_blocks());
}

struct Pair {
  explicit Pair(DType kv_dtype = DType::kF32)
      : target(load(backend, 4096, kv_dtype)), draft(load(backend, 4096, kv_dtype)) {}
  CpuBackend backend{CpuBackendOptions{2}};
  std::unique_ptr<ModelInstance> target;
  std::unique_ptr<ModelInstance> draft;  // same folder: draft = target
  EngineOptions options(int64_t threshold = 8192, const std::string& fault = "") {
    EngineOptions o;
    o.specprefill.draft = draft.get();
    o.specprefill.threshold = threshold;
    o.specprefill.inject_fault = fault;
    return o;
  }
};

// Scoring reads the draft's cached keys (specprefill/prompt_keys.h): these run
// with an f32 and a bf16 KV cache (--kv-dtype) in both models.
class SpecPrefillKv : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(KvDtype, SpecPrefillKv, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(SpecPrefillKv, KeepAllWithDraftEqualToTargetEqualsPlainGeneration) {
  Pair pair(GetParam());
  const auto prompt = golden_ids("p2.input_ids");
  const auto expected = offline(*pair.target, prompt, {}, 16);
  Engine engine(*pair.target, pair.options());
  RequestOptions request{prompt, greedy(16), 1, -1};
  request.specprefill = SpecPrefillControls{true, 1.0};
  RequestStats stats;
  EXPECT_EQ(run(engine, request, &stats), expected);
  EXPECT_TRUE(stats.specprefill.applied);
  EXPECT_EQ(stats.specprefill.prompt_tokens, 333);
  EXPECT_EQ(stats.specprefill.kept_tokens, 333);
  EXPECT_TRUE(stats.specprefill.fallback_reason.empty());
  expect_pools_free(engine, *pair.draft);
}

// Keep 0.2 of 11 chunks: the draft scores like the HF reference, so the kept
// chunks are top-3 ∪ {first, last} = [0, 2, 7, 10] (109 tokens), prefilled at
// their original positions; decoding continues at position 333.
TEST(SpecPrefillEngine, SparsePrefillKeepsTheReferenceChunksAtOriginalPositions) {
  Pair pair;
  const auto prompt = golden_ids("p2.input_ids");
  std::vector<int32_t> kept_positions;
  for (int32_t chunk : golden_ids("score.kept_chunks_union_first_last")) {
    for (int32_t i = chunk * 32; i < std::min<int32_t>(333, chunk * 32 + 32); ++i)
      kept_positions.push_back(i);
  }
  ASSERT_EQ(kept_positions.size(), 109u);
  std::vector<int32_t> kept_tokens;
  for (int32_t p : kept_positions) kept_tokens.push_back(prompt[static_cast<size_t>(p)]);
  const auto expected = offline(*pair.target, kept_tokens, kept_positions, 12);

  Engine engine(*pair.target, pair.options());
  RequestOptions request{prompt, greedy(12), 1, -1};
  request.specprefill = SpecPrefillControls{true, 0.2};
  RequestStats stats;
  EXPECT_EQ(run(engine, request, &stats), expected);
  EXPECT_TRUE(stats.specprefill.applied);
  EXPECT_EQ(stats.specprefill.kept_tokens, 109);
  // The selection the web UI draws: the same reference chunks, one score per
  // chunk of the 333-token prompt.
  ASSERT_NE(stats.specprefill.selection, nullptr);
  const SpecPrefillSelection& selection = *stats.specprefill.selection;
  EXPECT_EQ(selection.chunk, 32);
  EXPECT_EQ(selection.first_position, 0);
  EXPECT_EQ(selection.chunk_scores.size(), 11u);
  EXPECT_EQ(selection.kept_chunks, golden_ids("score.kept_chunks_union_first_last"));
  EXPECT_EQ(engine.metrics().specprefill_applied_total, 1);
  EXPECT_EQ(engine.metrics().specprefill_tokens_saved_total, 333 - 109);
  expect_pools_free(engine, *pair.draft);
}

// The target sequence built from a selection holds ONLY the kept tokens:
// its block count follows the kept count, not the prompt length.
TEST(SpecPrefillEngine, TargetKvHoldsOnlyTheKeptTokens) {
  Pair pair;
  SpecPrefillOptions options = pair.options().specprefill;
  SpecPrefillStage stage(options, 2048, 0);
  Request request;
  request.options.prompt = golden_ids("p2.input_ids");
  request.stream = std::make_shared<StreamState>();
  stage.add(&request, 0, 0.2);
  std::vector<SpecPrefillOutcome> outcomes;
  for (int i = 0; i < 20 && outcomes.empty(); ++i) outcomes = stage.step();
  ASSERT_EQ(outcomes.size(), 1u);
  ASSERT_TRUE(outcomes[0].applied);
  EXPECT_EQ(pair.draft->pool().n_free(), pair.draft->pool().n_blocks());  // draft KV dropped

  Scheduler scheduler(pair.target->kv_manager(), SchedulerOptions{4096, 8, true, false});
  Sequence seq(pair.target->kv_manager().new_sequence(KvSequenceOptions{0, false}));
  seq.request = &request;
  seq.tokens = outcomes[0].tokens;
  seq.positions = outcomes[0].positions;
  seq.prefix_lookup_tokens = 0;
  scheduler.add_waiting(&seq);
  ScheduleResult step = scheduler.schedule();
  ASSERT_EQ(step.chunks.size(), 1u);
  EXPECT_EQ(seq.kv.n_slots(), 109);
  EXPECT_EQ(seq.kv.blocks().size(), 7u);  // ceil(109 / 16), not ceil(333 / 16) = 21
  EXPECT_EQ(step.plan.positions, outcomes[0].positions);
  EXPECT_EQ(seq.position_of(109), 333);  // the first generated token's position is M
  scheduler.commit(step);
  EXPECT_EQ(pair.target->pool().n_cached(), 0);  // a sparse selection is never published
  scheduler.remove(&seq);
}

// The lookahead run ahead as follow steps of one plan (StepPlan::follow_steps)
// selects what the step-by-step lookahead selects, for two jobs whose phases
// interleave (a 200-token budget: one job's lookahead beside the other's
// prefill chunks), and leaves the draft pool free.
TEST(SpecPrefillEngine, LookaheadInOneGoSelectsWhatStepByStepDoes) {
  std::map<std::string, SpecPrefillOutcome> outcome[2];
  int steps[2] = {0, 0};
  for (int ahead = 0; ahead < 2; ++ahead) {
    Pair pair;  // a fresh draft pool: nothing cached from the other run
    SpecPrefillOptions options = pair.options().specprefill;
    options.follow_steps = true;
    SpecPrefillStage stage(options, 200, 0);
    Request requests[2];
    const char* names[] = {"p2.input_ids", "p3.input_ids"};
    for (int r = 0; r < 2; ++r) {
      requests[r].options.prompt = golden_ids(names[r]);
      requests[r].stream = std::make_shared<StreamState>();
      stage.add(&requests[r], 0, 0.2);
    }
    for (; steps[ahead] < 100 && outcome[ahead].size() < 2; ++steps[ahead]) {
      for (SpecPrefillOutcome& done : stage.step(ahead == 1)) {
        outcome[ahead][done.request == &requests[0] ? names[0] : names[1]] = std::move(done);
      }
    }
    EXPECT_EQ(pair.draft->pool().n_free(), pair.draft->pool().n_blocks());
  }
  // Fewer calls run ahead (how many depends on where the tiny draft picks EOS,
  // which ends a lookahead early: mid-burst, the rest is ignored).
  EXPECT_LT(steps[1], steps[0]);
  ASSERT_EQ(outcome[0].size(), 2u);
  ASSERT_EQ(outcome[1].size(), 2u);
  for (const auto& [name, apart] : outcome[0]) {
    const SpecPrefillOutcome& together = outcome[1].at(name);
    ASSERT_TRUE(apart.applied && together.applied) << name;
    EXPECT_EQ(together.tokens, apart.tokens) << name;
    EXPECT_EQ(together.positions, apart.positions) << name;
    const auto& a = apart.stats.selection->chunk_scores;
    const auto& b = together.stats.selection->chunk_scores;
    ASSERT_EQ(a.size(), b.size());
    for (size_t c = 0; c < a.size(); ++c) EXPECT_NEAR(b[c], a[c], 1e-4 * std::abs(a[c])) << name;
  }
}

TEST(SpecPrefillEngine, FailuresFallBackToFullPrefillWithAReason) {
  for (const std::string fault : {"scoring", "draft_kv"}) {
    SCOPED_TRACE(fault);
    Pair pair;
    const auto prompt = golden_ids("p2.input_ids");
    const auto expected = offline(*pair.target, prompt, {}, 8);
    Engine engine(*pair.target, pair.options(8192, fault));
    RequestOptions request{prompt, greedy(8), 1, -1};
    request.specprefill = SpecPrefillControls{true, 0.2};
    RequestStats stats;
    EXPECT_EQ(run(engine, request, &stats), expected);
    EXPECT_FALSE(stats.specprefill.applied);
    EXPECT_EQ(stats.specprefill.selection, nullptr);  // nothing was selected
    EXPECT_NE(stats.specprefill.fallback_reason.find("injected"), std::string::npos);
    EXPECT_EQ(engine.metrics().specprefill_fallback_total, 1);
    expect_pools_free(engine, *pair.draft);
  }
}

TEST(SpecPrefillEngine, ThresholdAndPerRequestOverrides) {
  Pair pair;
  Engine engine(*pair.target, pair.options(/*threshold=*/200));
  const auto long_prompt = golden_ids("p2.input_ids");   // 333 tokens: above the threshold
  const auto short_prompt = golden_ids("p1.input_ids");  // 64 tokens: below
  RequestStats stats;
  run(engine, RequestOptions{long_prompt, greedy(4), 1, -1}, &stats);
  EXPECT_TRUE(stats.specprefill.applied);
  run(engine, RequestOptions{short_prompt, greedy(4), 1, -1}, &stats);
  EXPECT_FALSE(stats.specprefill.applied);
  EXPECT_TRUE(stats.specprefill.fallback_reason.empty());  // not attempted
  RequestOptions off{long_prompt, greedy(4), 1, -1};
  off.specprefill.enabled = false;
  run(engine, off, &stats);
  EXPECT_FALSE(stats.specprefill.applied);
  RequestOptions forced{short_prompt, greedy(4), 1, -1};
  forced.specprefill.enabled = true;
  run(engine, forced, &stats);
  EXPECT_TRUE(stats.specprefill.applied);
  RequestOptions bad{long_prompt, greedy(4), 1, -1};
  bad.specprefill.keep_pct = 1.5;
  auto rejected = engine.submit(bad);
  ASSERT_FALSE(rejected.ok());
  EXPECT_NE(rejected.message().find("specprefill_keep_pct"), std::string::npos);
  expect_pools_free(engine, *pair.draft);
}

// A cached target prefix is reused as is; only the suffix is scored.
TEST_P(SpecPrefillKv, CachedPrefixIsReusedAndOnlyTheSuffixIsScored) {
  Pair pair(GetParam());
  Engine engine(*pair.target, pair.options());
  const auto prompt = golden_ids("p2.input_ids");
  RequestOptions dense{std::vector<int32_t>(prompt.begin(), prompt.begin() + 200), greedy(2), 1,
                       -1};
  dense.specprefill.enabled = false;
  run(engine, dense);  // publishes 12 full blocks = 192 tokens
  RequestOptions sparse{prompt, greedy(6), 1, -1};
  sparse.specprefill = SpecPrefillControls{true, 0.3};
  RequestStats stats;
  run(engine, sparse, &stats);
  EXPECT_TRUE(stats.specprefill.applied);
  EXPECT_EQ(stats.specprefill.prompt_tokens, 333 - 192);
  EXPECT_EQ(stats.cached_tokens, 192);
  EXPECT_LT(stats.specprefill.kept_tokens, 333 - 192);
  // The selection's chunks start after the cached prefix, and the kept ones
  // add up to kept_tokens (only the last chunk is short).
  ASSERT_NE(stats.specprefill.selection, nullptr);
  const SpecPrefillSelection& selection = *stats.specprefill.selection;
  EXPECT_EQ(selection.first_position, 192);
  EXPECT_EQ(selection.chunk_scores.size(), static_cast<size_t>((333 - 192 + 31) / 32));
  int64_t kept = 0;
  for (int32_t c : selection.kept_chunks) {
    const int64_t start = 192 + int64_t{c} * 32;
    kept += std::min<int64_t>(start + 32, 333) - start;
  }
  EXPECT_EQ(kept, stats.specprefill.kept_tokens);
  expect_pools_free(engine, *pair.draft);
}

TEST(SpecPrefillEngine, MixedTrafficWithShortStreamsLeavesBothPoolsFree) {
  Pair pair;
  EngineOptions options = pair.options(/*threshold=*/300);
  options.max_num_batched_tokens = 64;  // long prompts take many chunked steps
  Engine engine(*pair.target, options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto long_prompt = golden_ids("p3.input_ids");  // 1200 tokens
  for (int i = 0; i < 3; ++i) {
    auto s = engine.submit(RequestOptions{long_prompt, greedy(8), 1, -1});
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  for (int i = 0; i < 6; ++i) {
    auto s = engine.submit(RequestOptions{golden_ids("p0.input_ids"), greedy(20), 1, -1});
    ASSERT_TRUE(s.ok());
    streams.push_back(*s);
  }
  streams[1]->cancel();  // one long request is cancelled while being scored or prefilled
  for (auto& s : streams) {
    while (!s->done()) s->next(5000ms);
  }
  EXPECT_TRUE(streams[0]->stats().specprefill.applied);
  EXPECT_FALSE(streams[3]->stats().specprefill.applied);
  expect_pools_free(engine, *pair.draft);
}

}  // namespace
}  // namespace specstack

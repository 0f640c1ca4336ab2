// Speculative decoding inside the serving engine: greedy output equal to
// plain greedy decoding token for token (every golden architecture, with the
// model itself and with another model as the draft), logprobs that are the
// target's, stop ids and max_tokens, n > 1, preemption and cancellation
// mid-speculation, speculative prefill handing its draft KV over, the sparse
// draft window, and both KV pools fully free afterwards.
#include <gtest/gtest.h>

#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "engine_test_util.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "test_util.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;

const char* const kArchitectures[] = {"llama-gqa", "llama3-rope", "mistral-swa",
                                      "qwen2",     "qwen3",       "qwen3-moe"};

std::unique_ptr<ModelInstance> load(Backend& backend, const std::string& name,
                                    int64_t kv_tokens = 4096, DType kv_dtype = DType::kF32) {
  ModelInstanceOptions options;
  options.kv_tokens = kv_tokens;
  options.kv_dtype = kv_dtype;
  return testing::load_golden_model(name, backend, options);
}

std::vector<int32_t> prompt_of(const std::string& model, const std::string& name) {
  testing::GoldenReference ref(testing::golden_model_dir(model) + "/reference.safetensors");
  return ref.ids(name);
}

using testing::greedy;

struct Output {
  std::vector<std::vector<int32_t>> tokens;         // [choice]
  std::vector<std::vector<TokenLogprob>> logprobs;  // [choice]
  RequestStats stats;
  int64_t max_draft_blocks_used = 0;  // sampled from metrics while it ran
};

std::shared_ptr<RequestStream> submit(Engine& engine, RequestOptions options) {
  auto stream = engine.submit(std::move(options));
  SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
  return *std::move(stream);
}

// Reads a submitted request's events to the end (cancelling it after
// cancel_after tokens when that is >= 0).
Output collect(Engine& engine, const std::shared_ptr<RequestStream>& request, int32_t n,
               int32_t cancel_after = -1) {
  Output out;
  out.tokens.resize(static_cast<size_t>(n));
  out.logprobs.resize(static_cast<size_t>(n));
  int32_t seen = 0;
  while (!request->done()) {
    auto event = request->next(5000ms);
    const EngineMetrics m = engine.metrics();
    out.max_draft_blocks_used =
        std::max(out.max_draft_blocks_used, m.draft_kv_blocks_total - m.draft_kv_blocks_free);
    if (!event) continue;
    auto& tokens = out.tokens[static_cast<size_t>(event->choice)];
    tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
    auto& logprobs = out.logprobs[static_cast<size_t>(event->choice)];
    logprobs.insert(logprobs.end(), event->logprobs.begin(), event->logprobs.end());
    seen += static_cast<int32_t>(event->tokens.size());
    if (cancel_after >= 0 && seen >= cancel_after) request->cancel();
  }
  out.stats = request->stats();
  return out;
}

Output run(Engine& engine, RequestOptions options, int32_t cancel_after = -1) {
  const int32_t n = options.n;
  return collect(engine, submit(engine, std::move(options)), n, cancel_after);
}

std::vector<int32_t> offline_greedy(ModelInstance& model, const std::vector<int32_t>& prompt,
                                    int32_t max_tokens) {
  Generator generator(model.runner(), model.kv_manager());
  auto result = generator.generate({GenerationRequest{prompt, {}, greedy(max_tokens)}});
  SS_CHECK(result.ok());
  return (*result)[0].tokens;
}

EngineOptions spec_options(ModelInstance* draft, int32_t k = 4, bool adaptive = false) {
  EngineOptions options;
  options.specdecode.draft = draft;
  options.specdecode.max_draft_tokens = k;
  options.specdecode.adaptive = adaptive;  // always K: every step speculates
  return options;
}

// The heart of it: whatever the draft proposes, greedy speculative decoding
// emits exactly the target's greedy tokens. A self-draft accepts (nearly)
// everything, which exercises the bonus token; another architecture's
// random weights accept little, which exercises the rejection path.
TEST(SpecDecodeEngine, GreedyEqualsPlainGreedyForEveryGoldenArchitecture) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto other_draft = load(backend, "llama3-rope");
  for (const char* name : kArchitectures) {
    SCOPED_TRACE(name);
    auto target = load(backend, name);
    const auto prompt = prompt_of(name, "p1.input_ids");
    const auto expected = offline_greedy(*target, prompt, 40);
    auto self_draft = load(backend, name);
    for (ModelInstance* draft : {self_draft.get(), other_draft.get()}) {
      for (int32_t k : {1, 4}) {
        Engine engine(*target, spec_options(draft, k));
        const Output out = run(engine, RequestOptions{prompt, greedy(40), 1, -1});
        EXPECT_EQ(out.tokens[0], expected) << "k " << k;
        EXPECT_TRUE(out.stats.speculative.enabled);
        EXPECT_GT(out.stats.speculative.draft_tokens, 0);
        if (draft == self_draft.get()) {
          // Same weights: only float near-ties between a 1-row draft step and
          // a k+1-row verify step can reject.
          EXPECT_GE(out.stats.speculative.accepted_tokens,
                    out.stats.speculative.draft_tokens * 9 / 10);
        }
        testing::expect_engine_drained(engine);
      }
    }
  }
}

// Rollback of rejected draft tokens (and preemption mid-speculation) with an
// f32 and a bf16 KV cache (--kv-dtype) in both models.
class SpecDecodeKv : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(KvDtype, SpecDecodeKv, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(SpecDecodeKv, TinyStoriesGreedyEqualsPlainWithEveryK) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "tinystories-656k", 4096, GetParam());
  auto draft = load(backend, "tinystories-656k", 4096, GetParam());
  const auto prompt = prompt_of("tinystories-656k", "t1.input_ids");
  const auto expected = offline_greedy(*target, prompt, 48);
  for (int32_t k : {2, 3, 8}) {
    Engine engine(*target, spec_options(draft.get(), k));
    const Output out = run(engine, RequestOptions{prompt, greedy(48), 1, -1});
    EXPECT_EQ(out.tokens[0], expected) << "k " << k;
    testing::expect_engine_drained(engine);
  }
}

// A draft whose embedding table is smaller than the target's (a family can
// pad them differently: Qwen2.5-7B 152064 rows, 0.5B 151936): once the
// sequence holds a token the draft cannot read, it decodes without
// speculation, exactly, and the draft's blocks come back.
TEST(SpecDecodeEngine, TokensPastTheDraftsVocabularyEndSpeculationExactly) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "tinystories-656k");  // 2048 ids
  auto draft = load(backend, "llama3-rope");        // 512 ids
  std::vector<int32_t> prompt;
  for (int32_t id : prompt_of("tinystories-656k", "t1.input_ids"))
    if (id < 512) prompt.push_back(id);
  const auto expected = offline_greedy(*target, prompt, 48);
  ASSERT_TRUE(std::any_of(expected.begin(), expected.end(), [](int32_t id) { return id >= 512; }));
  Engine engine(*target, spec_options(draft.get(), 4));
  const Output out = run(engine, RequestOptions{prompt, greedy(48), 1, -1});
  EXPECT_EQ(out.tokens[0], expected);
  // Speculated until the first token past 512 (at most K drafts per target token before it).
  const auto first_off =
      std::find_if(expected.begin(), expected.end(), [](int32_t id) { return id >= 512; });
  EXPECT_LE(out.stats.speculative.draft_tokens, 4 * (first_off - expected.begin() + 1));
  testing::expect_engine_drained(engine);

  // A prompt the draft cannot read never speculates.
  std::vector<int32_t> wide = prompt;
  wide.push_back(1500);
  const auto wide_expected = offline_greedy(*target, wide, 16);
  const Output wide_out = run(engine, RequestOptions{wide, greedy(16), 1, -1});
  EXPECT_EQ(wide_out.tokens[0], wide_expected);
  EXPECT_EQ(wide_out.stats.speculative.draft_tokens, 0);
  testing::expect_engine_drained(engine);
}

TEST(SpecDecodeEngine, LogprobsAreTheTargetsAndMaxTokensStopsExactly) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p1.input_ids");
  EngineOptions plain_options;
  Engine plain(*target, plain_options);
  const Output reference = run(plain, RequestOptions{prompt, greedy(13), 1, 3});
  testing::expect_engine_drained(plain);
  Engine engine(*target, spec_options(draft.get(), 4));
  const Output out = run(engine, RequestOptions{prompt, greedy(13), 1, 3});
  ASSERT_EQ(out.tokens[0], reference.tokens[0]);
  ASSERT_EQ(out.tokens[0].size(), 13u);  // 13 is not a multiple of k + 1
  ASSERT_EQ(out.logprobs[0].size(), 13u);
  for (size_t i = 0; i < 13; ++i) {
    EXPECT_EQ(out.logprobs[0][i].token, reference.logprobs[0][i].token);
    EXPECT_NEAR(out.logprobs[0][i].logprob, reference.logprobs[0][i].logprob, 1e-4);
    ASSERT_EQ(out.logprobs[0][i].top.size(), 3u);
    for (size_t j = 0; j < 3; ++j)
      EXPECT_EQ(out.logprobs[0][i].top[j].first, reference.logprobs[0][i].top[j].first);
  }
  testing::expect_engine_drained(engine);
}

TEST(SpecDecodeEngine, StopTokenInsideAnAcceptedRunEndsThere) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p1.input_ids");
  const auto expected = offline_greedy(*target, prompt, 30);
  SamplingParams params = greedy(30);
  params.stop_token_ids = {expected[6]};  // first seen at index <= 6
  const auto stop_at = std::find(expected.begin(), expected.end(), expected[6]) - expected.begin();
  Engine engine(*target, spec_options(draft.get(), 4));
  const Output out = run(engine, RequestOptions{prompt, params, 1, -1});
  EXPECT_EQ(out.tokens[0], std::vector<int32_t>(expected.begin(), expected.begin() + stop_at + 1));
  testing::expect_engine_drained(engine);
}

TEST(SpecDecodeEngine, ForkedChoicesEachSpeculate) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "qwen2");
  auto draft = load(backend, "qwen2");
  const auto prompt = prompt_of("qwen2", "p1.input_ids");
  const auto expected = offline_greedy(*target, prompt, 24);
  Engine engine(*target, spec_options(draft.get(), 3));
  const Output out = run(engine, RequestOptions{prompt, greedy(24), 3, -1});
  for (const auto& tokens : out.tokens) EXPECT_EQ(tokens, expected);
  // Each of the three choices verified draft tokens of its own.
  EXPECT_GE(out.stats.speculative.draft_tokens, 3 * 3);
  testing::expect_engine_drained(engine);
}

// Sampling with speculation: runs to max_tokens with a seed, reproducibly, and
// frees everything (the distribution itself is proven in
// speculative_sampling_test.cpp).
TEST(SpecDecodeEngine, SeededSamplingIsReproducible) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama3-rope");
  const auto prompt = prompt_of("llama-gqa", "p1.input_ids");
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.9f;
  params.presence_penalty = 0.5f;
  params.seed = 42;
  params.max_tokens = 32;
  params.ignore_eos = true;
  Engine engine(*target, spec_options(draft.get(), 4));
  const Output a = run(engine, RequestOptions{prompt, params, 2, -1});
  const Output b = run(engine, RequestOptions{prompt, params, 2, -1});
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens[0].size(), 32u);
  EXPECT_GT(a.stats.speculative.draft_tokens, 0);
  testing::expect_engine_drained(engine);
}

TEST_P(SpecDecodeKv, PreemptionMidSpeculationKeepsEveryStreamExact) {
  CpuBackend backend{CpuBackendOptions{2}};
  // 12 blocks of 16: four requests of ~50 + 40 tokens cannot all run at once.
  auto target = load(backend, "llama-gqa", 12 * 16, GetParam());
  auto draft = load(backend, "llama-gqa", 4096, GetParam());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
  for (const char* name : {"p0.input_ids", "p1.input_ids", "p2.input_ids", "p3.input_ids"}) {
    auto prompt = prompt_of("llama-gqa", name);
    prompt.resize(std::min<size_t>(prompt.size(), 50));
    expected.push_back(offline_greedy(*target, prompt, 40));
    prompts.push_back(std::move(prompt));
  }
  // All four are submitted before any is read, but the engine runs on its
  // own thread: on a loaded machine (CI runs tests in parallel) the test
  // thread can lose the CPU between two submits while the first requests
  // run, and then they never compete for the 12 blocks. Every attempt must be
  // exact; preemption must happen in at least one of a few attempts (each
  // with a fresh engine), so a scheduler that never preempts still fails.
  int32_t preemptions = 0;
  for (int attempt = 0; attempt < 5 && preemptions == 0; ++attempt) {
    SCOPED_TRACE(attempt);
    Engine engine(*target, spec_options(draft.get(), 4));
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& prompt : prompts) {
      streams.push_back(submit(engine, RequestOptions{prompt, greedy(40), 1, -1}));
    }
    std::vector<Output> outputs;
    for (const auto& stream : streams) outputs.push_back(collect(engine, stream, 1));
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(outputs[i].tokens[0], expected[i]) << i;
      preemptions += outputs[i].stats.preemptions;
    }
    testing::expect_engine_drained(engine);
  }
  EXPECT_GT(preemptions, 0);
}

TEST(SpecDecodeEngine, CancelMidSpeculationFreesBothPools) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama3-rope");
  const auto prompt = prompt_of("llama-gqa", "p1.input_ids");
  Engine engine(*target, spec_options(draft.get(), 4));
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const Output out = run(engine, RequestOptions{prompt, greedy(200), 1 + i % 2, -1}, 5 + i);
      EXPECT_LT(out.tokens[0].size(), 200u);
    });
  }
  for (auto& thread : threads) thread.join();
  testing::expect_engine_drained(engine);
}

// The draft scores the prompt for speculative prefill, then keeps its prompt
// KV and speculates from it: keep 1.0 with draft = target gives plain output;
// keep 0.2 gives what a sparse prefill of the kept chunks gives.
TEST(SpecDecodeEngine, SpecPrefillHandsItsDraftKvToSpeculativeDecoding) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p2.input_ids");
  EngineOptions options = spec_options(draft.get(), 4);
  options.specprefill.draft = draft.get();
  Engine engine(*target, options);

  RequestOptions keep_all{prompt, greedy(20), 1, -1};
  keep_all.specprefill = SpecPrefillControls{true, 1.0};
  const Output all = run(engine, keep_all);
  EXPECT_EQ(all.tokens[0], offline_greedy(*target, prompt, 20));
  EXPECT_TRUE(all.stats.specprefill.applied);
  EXPECT_GT(all.stats.speculative.accepted_tokens, 0);

  RequestOptions sparse{prompt, greedy(20), 1, -1};
  sparse.specprefill = SpecPrefillControls{true, 0.2};
  const Output kept = run(engine, sparse);
  ASSERT_TRUE(kept.stats.specprefill.applied);
  EXPECT_EQ(kept.stats.specprefill.kept_tokens, 109);
  EXPECT_GT(kept.stats.speculative.draft_tokens, 0);
  // The same request without speculative decoding: identical tokens.
  RequestOptions sparse_plain = sparse;
  sparse_plain.specdecode.enabled = false;
  const Output plain = run(engine, sparse_plain);
  EXPECT_EQ(kept.tokens[0], plain.tokens[0]);
  EXPECT_FALSE(plain.stats.speculative.enabled);
  EXPECT_EQ(plain.stats.speculative.draft_tokens, 0);
  testing::expect_engine_drained(engine);
}

// A sink + window draft holds a bounded number of blocks whatever the prompt
// length, and greedy output stays the target's.
TEST(SpecDecodeEngine, SparseDraftWindowBoundsAndFreesDraftBlocks) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p2.input_ids");  // 333 tokens: 21 blocks dense
  const auto expected = offline_greedy(*target, prompt, 40);
  EngineOptions options = spec_options(draft.get(), 4);
  options.max_num_batched_tokens = 64;  // the draft catches up in chunks, trimming as it goes
  options.specdecode.draft_window = 32;
  options.specdecode.draft_sink = 4;
  Engine engine(*target, options);
  const Output out = run(engine, RequestOptions{prompt, greedy(40), 1, -1});
  EXPECT_EQ(out.tokens[0], expected);
  EXPECT_GT(out.stats.speculative.draft_tokens, 0);
  // 1 sink block + 3 window blocks (32 slots from any offset) + 64 chunk
  // slots (4 blocks) + draft tokens (1 block), against 21+ dense.
  EXPECT_LE(out.max_draft_blocks_used, 10);
  EXPECT_GT(out.max_draft_blocks_used, 0);
  testing::expect_engine_drained(engine);
}

// A sparse draft publishes the dense prompt KV of its first catch-up chunk
// on the draft's prefix cache, and nothing after its first dropped block: a
// later request sharing the prompt starts from those blocks instead of
// prefilling it on the draft again (before, a sparse draft never published,
// and bench spec's batch-32 8K runs re-prefilled evicted prompts every step).
TEST(SpecDecodeEngine, SparseDraftPublishesOnlyItsDenseCatchUp) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p2.input_ids");  // 333 tokens: 20 full blocks
  const auto expected = offline_greedy(*target, prompt, 24);
  EngineOptions sparse = spec_options(nullptr, 4);
  sparse.specdecode.draft_window = 32;
  sparse.specdecode.draft_sink = 4;

  // One catch-up chunk holds the whole prompt: all 20 full blocks are dense.
  auto draft = load(backend, "llama-gqa");
  sparse.specdecode.draft = draft.get();
  {
    Engine engine(*target, sparse);
    EXPECT_EQ(run(engine, RequestOptions{prompt, greedy(24), 1, -1}).tokens[0], expected);
    testing::expect_engine_drained(engine);
  }
  EXPECT_EQ(draft->pool().n_cached(), 20);
  // A dense self-draft on the same pool starts from them: it prefills only
  // the last partial block, and its proposals (from the published KV) are
  // the target's, as with a draft that computed the prompt itself.
  const PrefixCacheStats before = draft->pool().prefix_stats();
  {
    Engine engine(*target, spec_options(draft.get(), 4));
    const Output out = run(engine, RequestOptions{prompt, greedy(24), 1, -1});
    EXPECT_EQ(out.tokens[0], expected);
    EXPECT_GE(out.stats.speculative.accepted_tokens, out.stats.speculative.draft_tokens * 9 / 10);
    testing::expect_engine_drained(engine);
  }
  EXPECT_EQ(draft->pool().prefix_stats().n_hit_tokens - before.n_hit_tokens, 20 * 16);

  // Chunks of 64 tokens: the first chunk (4 blocks) is dense; the window
  // drops a block after it, and later chunks attend to sink + window only,
  // so their blocks must not be published.
  auto chunked_draft = load(backend, "llama-gqa");
  sparse.specdecode.draft = chunked_draft.get();
  sparse.max_num_batched_tokens = 64;
  {
    Engine engine(*target, sparse);
    EXPECT_EQ(run(engine, RequestOptions{prompt, greedy(24), 1, -1}).tokens[0], expected);
    testing::expect_engine_drained(engine);
  }
  EXPECT_EQ(chunked_draft->pool().n_cached(), 4);
}

TEST(SpecDecodeEngine, RequestCanTurnItOffAndServerDefaultCanBeOff) {
  CpuBackend backend{CpuBackendOptions{2}};
  auto target = load(backend, "llama-gqa");
  auto draft = load(backend, "llama-gqa");
  const auto prompt = prompt_of("llama-gqa", "p1.input_ids");
  EngineOptions options = spec_options(draft.get(), 4);
  options.specdecode.default_on = false;
  Engine engine(*target, options);
  const Output off = run(engine, RequestOptions{prompt, greedy(10), 1, -1});
  EXPECT_FALSE(off.stats.speculative.enabled);
  RequestOptions on{prompt, greedy(10), 1, -1};
  on.specdecode.enabled = true;
  const Output forced = run(engine, on);
  EXPECT_TRUE(forced.stats.speculative.enabled);
  EXPECT_GT(forced.stats.speculative.draft_tokens, 0);
  EXPECT_EQ(forced.tokens, off.tokens);
  testing::expect_engine_drained(engine);  // also waits for the loop's last metrics snapshot
  const EngineMetrics m = engine.metrics();
  EXPECT_EQ(m.specdecode_draft_tokens_total, forced.stats.speculative.draft_tokens);
  EXPECT_EQ(m.specdecode_accepted_tokens_total, forced.stats.speculative.accepted_tokens);
  EXPECT_GT(m.specdecode_verify_total, 0);
  EXPECT_EQ(m.specdecode_accepted_length.count, m.specdecode_verify_total);
}

}  // namespace
}  // namespace specstack

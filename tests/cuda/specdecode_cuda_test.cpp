// Speculative decoding on the GPU: target and draft both on the device
// (bf16), draft steps replaying captured graphs, verify steps of K + 1 rows
// per sequence in the target's flat step. Greedy speculation must give the
// plain engine's greedy tokens up to the first bf16 near-tie (a verify row
// is computed in a different batch shape than a decode row, so below bf16
// resolution either id is right), and both block pools must come back whole.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "../engine/engine_test_util.h"
#include "../engine/golden_run.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda/cuda_model.h"
#include "cuda_test_util.h"
#include "engine/engine.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;

// Logprob margin between the plain run's best and second token under which
// a fork is a bf16 near-tie (the golden tests' greedy margin).
constexpr float kTieMargin = 0.05f;

std::unique_ptr<ModelInstance> load_gpu(const std::string& name, CpuBackend& backend) {
  ModelInstanceOptions options;
  options.kv_tokens = 8192;
  options.device = Device::kCuda;
  options.cuda_graphs = true;
  options.graph_max_context = 1024;
  return testing::load_golden_model(name, backend, options);
}

struct EngineRun {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;
  int64_t drafted = 0, accepted = 0;
};

// Four greedy requests at once, so plain and verify rows share steps with
// other sequences' rows.
EngineRun run_all(Engine& engine, bool speculate, int32_t max_tokens, int n_requests = 4) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < n_requests; ++r) {
    std::vector<int32_t> prompt;
    for (int j = 0; j < 30 + 41 * (r % 4) + r / 4; ++j)
      prompt.push_back(3 + (j * 29 + r * 13) % 500);
    SamplingParams params;
    params.temperature = 0;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    RequestOptions options{prompt, params, 1, speculate ? -1 : 2};
    options.specdecode.enabled = speculate;
    auto stream = engine.submit(std::move(options));
    SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
    streams.push_back(*stream);
  }
  EngineRun run;
  for (auto& stream : streams) {
    run.tokens.emplace_back();
    run.logprobs.emplace_back();
    while (!stream->done()) {
      auto event = stream->next(10000ms);
      if (!event) continue;
      run.tokens.back().insert(run.tokens.back().end(), event->tokens.begin(), event->tokens.end());
      run.logprobs.back().insert(run.logprobs.back().end(), event->logprobs.begin(),
                                 event->logprobs.end());
    }
    run.drafted += stream->stats().speculative.draft_tokens;
    run.accepted += stream->stats().speculative.accepted_tokens;
  }
  return run;
}

class SpecDecodeCudaTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecDecodeCudaTest, GreedyEqualsPlainUpToANearTie) {
  SS_REQUIRE_GPU();
  CpuBackend backend(CpuBackendOptions{1});
  const std::string name = GetParam();
  auto target = load_gpu(name, backend);
  auto other = load_gpu(name == "llama3-rope" ? "qwen2" : "llama3-rope", backend);
  constexpr int32_t kTokens = 40;
  Engine plain_engine(*target, EngineOptions{});
  const EngineRun plain = run_all(plain_engine, false, kTokens);
  testing::expect_engine_drained(plain_engine);
  for (ModelInstance* draft : {target.get(), other.get()}) {
    for (int32_t k : {1, 4}) {
      SCOPED_TRACE(name + (draft == target.get() ? " self-draft" : " other draft") + " k " +
                   std::to_string(k));
      EngineOptions options;
      options.specdecode.draft = draft;
      options.specdecode.max_draft_tokens = k;
      options.specdecode.adaptive = false;
      Engine engine(*target, options);
      const EngineRun spec = run_all(engine, true, kTokens);
      EXPECT_GT(spec.drafted, 0);
      size_t identical = 0, total = 0;
      for (size_t r = 0; r < plain.tokens.size(); ++r) {
        ASSERT_EQ(spec.tokens[r].size(), size_t(kTokens));
        size_t i = 0;
        while (i < plain.tokens[r].size() && spec.tokens[r][i] == plain.tokens[r][i]) ++i;
        identical += i;
        total += plain.tokens[r].size();
        if (i == plain.tokens[r].size()) continue;
        // Forked: only where the plain run's top two were within bf16 noise.
        const TokenLogprob& at = plain.logprobs[r][i];
        ASSERT_GE(at.top.size(), 2u);
        const float margin = at.top[0].second - at.top[1].second;
        EXPECT_LT(margin, kTieMargin) << "request " << r << " forked at token " << i;
      }
      std::printf(
          "[specdecode-cuda] %s %s k %d: %zu/%zu tokens identical before any fork, "
          "accepted %lld/%lld\n",
          name.c_str(), draft == target.get() ? "self-draft" : "other draft", k, identical, total,
          static_cast<long long>(spec.accepted), static_cast<long long>(spec.drafted));
      // A self-draft on the same device agrees almost always.
      if (draft == target.get()) {
        EXPECT_GT(spec.accepted * 10, spec.drafted * 8);
      }
      testing::expect_engine_drained(engine);
    }
  }
  // The draft replayed decode graphs for its steps.
  auto* cuda_draft = dynamic_cast<cuda::CudaModel*>(&other->model());
  ASSERT_NE(cuda_draft, nullptr);
  EXPECT_GT(cuda_draft->graph_replays(), 0);
}

INSTANTIATE_TEST_SUITE_P(Architectures, SpecDecodeCudaTest,
                         ::testing::ValuesIn(testing::golden_architectures()),
                         [](const auto& info) { return testing::test_name_part(info.param); });

// Head dim 64 (dummy weights; the golden models' 16/32 never reach it): four
// requests' 5 verify rows each make a step of 20 paged rows, which the run
// attention kernel (cuda/verify_attention.h) serves. Greedy output equals
// plain decoding up to a bf16 near-tie, as with the per-token kernel.
TEST(SpecDecodeCuda, RunAttentionGreedyEqualsPlainUpToANearTie) {
  SS_REQUIRE_GPU();
  CpuBackend backend(CpuBackendOptions{1});
  ModelInstanceOptions options;
  options.config_path = testing::test_data("configs/qwen2.5-draft-tiny.json");
  options.dummy_weights = true;
  options.kv_tokens = 8192;
  options.device = Device::kCuda;
  options.graph_max_context = 1024;
  auto created = ModelInstance::create(options, backend);
  ASSERT_TRUE(created.ok()) << created.message();
  std::unique_ptr<ModelInstance> target = std::move(created).value();
  ASSERT_EQ(target->config().head_dim, 64);
  constexpr int32_t kTokens = 40;
  Engine plain_engine(*target, EngineOptions{});
  const EngineRun plain = run_all(plain_engine, false, kTokens);
  EngineOptions spec_options;
  spec_options.specdecode.draft = target.get();
  spec_options.specdecode.max_draft_tokens = 4;
  spec_options.specdecode.adaptive = false;
  Engine engine(*target, spec_options);
  const EngineRun spec = run_all(engine, true, kTokens);
  EXPECT_GT(spec.accepted * 10, spec.drafted * 8);  // self-draft: nearly all accepted
  size_t identical = 0;
  for (size_t r = 0; r < plain.tokens.size(); ++r) {
    ASSERT_EQ(spec.tokens[r].size(), size_t(kTokens));
    size_t i = 0;
    while (i < plain.tokens[r].size() && spec.tokens[r][i] == plain.tokens[r][i]) ++i;
    identical += i;
    if (i == plain.tokens[r].size()) continue;
    const TokenLogprob& at = plain.logprobs[r][i];
    ASSERT_GE(at.top.size(), 2u);
    EXPECT_LT(at.top[0].second - at.top[1].second, kTieMargin)
        << "request " << r << " forked at token " << i;
  }
  std::printf("[specdecode-cuda] run attention: %zu/%d tokens identical before any fork\n",
              identical, 4 * kTokens);
  testing::expect_engine_drained(engine);
}

// Decode steps take the run kernel too (rows as runs of one), graph replays
// included: 32 greedy requests on a head-dim-64 dummy qwen2 decode through
// batch-32 graphs with it and agree with the per-token kernel
// (--no-run-attention) up to a bf16 near-tie.
TEST(SpecDecodeCuda, DecodeGraphsOnTheRunKernelEqualPerTokenUpToANearTie) {
  SS_REQUIRE_GPU();
  CpuBackend backend(CpuBackendOptions{1});
  constexpr int32_t kTokens = 24, kRequests = 32;
  EngineRun runs[2];
  for (int run_kernel = 0; run_kernel < 2; ++run_kernel) {
    ModelInstanceOptions options;
    options.config_path = testing::test_data("configs/qwen2.5-draft-tiny.json");
    options.dummy_weights = true;
    options.kv_tokens = 16384;
    options.device = Device::kCuda;
    options.graph_max_context = 1024;
    options.run_attention = run_kernel == 1;
    auto created = ModelInstance::create(options, backend);
    ASSERT_TRUE(created.ok()) << created.message();
    std::unique_ptr<ModelInstance> model = std::move(created).value();
    ASSERT_EQ(model->config().head_dim, 64);
    Engine engine(*model, EngineOptions{});
    runs[run_kernel] = run_all(engine, false, kTokens, kRequests);
    auto* cuda_model = dynamic_cast<cuda::CudaModel*>(&model->model());
    ASSERT_NE(cuda_model, nullptr);
    EXPECT_GT(cuda_model->graph_replays(), 0);
    testing::expect_engine_drained(engine);
  }
  size_t identical = 0;
  for (size_t r = 0; r < runs[0].tokens.size(); ++r) {
    ASSERT_EQ(runs[1].tokens[r].size(), size_t(kTokens));
    size_t i = 0;
    while (i < runs[0].tokens[r].size() && runs[1].tokens[r][i] == runs[0].tokens[r][i]) ++i;
    identical += i;
    if (i == runs[0].tokens[r].size()) continue;
    const TokenLogprob& at = runs[0].logprobs[r][i];
    ASSERT_GE(at.top.size(), 2u);
    EXPECT_LT(at.top[0].second - at.top[1].second, kTieMargin)
        << "request " << r << " forked at token " << i;
  }
  std::printf(
      "[specdecode-cuda] decode on the run kernel: %zu/%d tokens identical before any fork\n",
      identical, kRequests * kTokens);
  EXPECT_GT(identical * 10, size_t(kRequests * kTokens) * 8);
}

// Sampling with speculation on the GPU: seeded runs reproduce themselves and
// the sparse draft window keeps both pools whole.
TEST(SpecDecodeCuda, SampledAndSparseDraftRunAndFreeEverything) {
  SS_REQUIRE_GPU();
  CpuBackend backend(CpuBackendOptions{1});
  auto target = load_gpu("tinystories-656k", backend);
  auto draft = load_gpu("tinystories-656k", backend);
  EngineOptions options;
  options.specdecode.draft = draft.get();
  options.specdecode.max_draft_tokens = 4;
  options.specdecode.adaptive = false;
  options.specdecode.draft_window = 32;
  options.specdecode.draft_sink = 4;
  std::vector<int32_t> tokens[2];
  for (int repeat = 0; repeat < 2; ++repeat) {
    Engine engine(*target, options);
    std::vector<int32_t> prompt;
    for (int j = 0; j < 150; ++j) prompt.push_back(3 + (j * 31) % 2000);
    SamplingParams params;
    params.temperature = 0.8f;
    params.top_p = 0.9f;
    params.seed = 5;
    params.max_tokens = 120;
    params.ignore_eos = true;
    RequestOptions request{prompt, params, 1, -1};
    auto stream = engine.submit(std::move(request));
    ASSERT_TRUE(stream.ok()) << stream.message();
    while (!(*stream)->done()) {
      auto event = (*stream)->next(10000ms);
      if (event)
        tokens[repeat].insert(tokens[repeat].end(), event->tokens.begin(), event->tokens.end());
    }
    EXPECT_GT((*stream)->stats().speculative.draft_tokens, 0);
    testing::expect_engine_drained(engine);
  }
  EXPECT_EQ(tokens[0].size(), 120u);
  EXPECT_EQ(tokens[0], tokens[1]);
}

}  // namespace
}  // namespace specstack

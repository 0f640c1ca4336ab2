// The serving engine end to end on a real (tiny) model: concurrent greedy
// requests equal offline generation, preemption under a tiny KV pool and
// prefix-cache hits change nothing in the output, n > 1 forks, cancellation
// at any point, back-pressure — and the block pool is fully free afterwards.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "engine_test_util.h"
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

std::vector<int32_t> prompt(uint32_t seed, int32_t length) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = 3 + static_cast<int32_t>(rng() % 509);
  return ids;
}

using testing::collect;
using testing::Collected;
using testing::greedy;

// The tests that exercise the KV cache (preemption, prefix caching, CoW of a
// shared prompt block) run with an f32 and a bf16 cache (--kv-dtype).
class EngineKv : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(KvDtype, EngineKv, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(EngineKv, ConcurrentGreedyRequestsEqualOfflineGenerationEvenWhenPreempted) {
  for (int64_t kv_tokens : {4096, 160}) {  // 160 tokens = 10 blocks: forces preemption
    SCOPED_TRACE(kv_tokens);
    CpuBackend backend(CpuBackendOptions{2});
    auto model = load(backend, kv_tokens, GetParam());
    std::vector<GenerationRequest> requests;
    for (uint32_t i = 0; i < 6; ++i) requests.push_back({prompt(i, 30 + 7 * i), {}, greedy(24)});
    const auto expected = testing::offline_outputs(*model, requests);

    Engine engine(*model, EngineOptions{/*max_num_batched_tokens=*/48, /*max_num_seqs=*/8});
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const auto& r : requests) {
      auto stream = engine.submit(RequestOptions{r.prompt, r.params, 1, -1});
      ASSERT_TRUE(stream.ok()) << stream.message();
      streams.push_back(*stream);
    }
    for (size_t i = 0; i < streams.size(); ++i) {
      Collected got = collect(*streams[i], 1);
      EXPECT_EQ(got.tokens[0], expected[i]) << "request " << i;
      EXPECT_EQ(got.finish[0], FinishReason::kFinishLength);
    }
    if (kv_tokens == 160) {
      EXPECT_GT(engine.metrics().preemptions_total, 0);
    }
    testing::expect_engine_drained(engine);
  }
}

TEST_P(EngineKv, PrefixCacheHitReportsCachedTokensAndKeepsOutputIdentical) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 4096, GetParam());
  const auto ids = prompt(42, 100);
  Engine engine(*model, EngineOptions{});
  auto cold = engine.submit(RequestOptions{ids, greedy(16), 1, -1});
  ASSERT_TRUE(cold.ok());
  Collected first = collect(**cold, 1);
  EXPECT_EQ((*cold)->stats().cached_tokens, 0);
  auto warm = engine.submit(RequestOptions{ids, greedy(16), 1, -1});
  ASSERT_TRUE(warm.ok());
  Collected second = collect(**warm, 1);
  EXPECT_EQ((*warm)->stats().cached_tokens,
            96);  // 6 full blocks of 16; the last token is recomputed
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_GE(engine.metrics().prefix_cache_hit_tokens, 96);
  testing::expect_engine_drained(engine);
}

TEST(Engine, ReportsQueueTimeAndTimeToFirstToken) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 4096);
  EngineOptions options;
  options.max_num_seqs = 1;  // the second request waits for the first
  Engine engine(*model, options);
  auto first = engine.submit(RequestOptions{prompt(1, 32), greedy(24), 1, -1});
  auto second = engine.submit(RequestOptions{prompt(2, 32), greedy(4), 1, -1});
  auto never_ran = engine.submit(RequestOptions{prompt(3, 32), greedy(4), 1, -1});
  ASSERT_TRUE(first.ok() && second.ok() && never_ran.ok());
  (*never_ran)->cancel();  // behind 28 steps of the others: cancelled while queued
  collect(**first, 1);
  collect(**second, 1);
  collect(**never_ran, 1);
  const RequestStats a = (*first)->stats();
  const RequestStats b = (*second)->stats();
  ASSERT_TRUE(a.queue_ms && a.ttft_ms && b.queue_ms && b.ttft_ms);
  EXPECT_GE(*a.queue_ms, 0.0);
  EXPECT_GE(*a.ttft_ms, *a.queue_ms);  // the first token comes out of a step that ran it
  EXPECT_GE(*b.ttft_ms, *b.queue_ms);
  EXPECT_GT(*b.queue_ms, *a.ttft_ms);  // admitted only once the first had finished
  EXPECT_FALSE((*never_ran)->stats().queue_ms);
  EXPECT_FALSE((*never_ran)->stats().ttft_ms);
  testing::expect_engine_drained(engine);
}

TEST_P(EngineKv, ParallelChoicesShareThePromptAndSampleIndependently) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 4096, GetParam());
  const auto ids = prompt(7, 37);
  const auto expected = testing::offline_outputs(*model, {{ids, {}, greedy(10)}});
  Engine engine(*model, EngineOptions{});
  auto greedy_stream = engine.submit(RequestOptions{ids, greedy(10), 3, -1});
  ASSERT_TRUE(greedy_stream.ok());
  Collected got = collect(**greedy_stream, 3);
  for (int c = 0; c < 3; ++c)
    EXPECT_EQ(got.tokens[static_cast<size_t>(c)], expected[0]) << "choice " << c;
  EXPECT_EQ((*greedy_stream)->stats().generated_tokens, 30);

  SamplingParams sampled = greedy(12);
  sampled.temperature = 1.5f;
  sampled.seed = 99;
  auto a = engine.submit(RequestOptions{ids, sampled, 3, 2});
  auto b = engine.submit(RequestOptions{ids, sampled, 3, 2});
  Collected ra = collect(**a, 3), rb = collect(**b, 3);
  EXPECT_EQ(ra.tokens, rb.tokens);        // seeded: reproducible
  EXPECT_NE(ra.tokens[0], ra.tokens[1]);  // each choice has its own stream of randomness
  testing::expect_engine_drained(engine);
}

TEST(Engine, LogprobsAreLogSoftmaxOfTheRawLogits) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 4096);
  Engine engine(*model, EngineOptions{});
  auto stream = engine.submit(RequestOptions{prompt(3, 20), greedy(4), 1, 5});
  ASSERT_TRUE(stream.ok());
  int events = 0;
  while (!(*stream)->done()) {
    auto event = (*stream)->next(5000ms);
    if (!event || event->tokens.empty()) continue;
    ++events;
    ASSERT_EQ(event->logprobs.size(), 1u);
    const TokenLogprob& lp = event->logprobs[0];
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, event->tokens[0]);  // greedy picks the most likely token
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_LE(lp.top[i].second, lp.top[i - 1].second);
    EXPECT_LT(lp.logprob, 0.0f);
  }
  EXPECT_EQ(events, 4);
}

TEST(Engine, RandomCancellationOf64StreamsFreesEveryBlock) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 1024);  // small pool: preemption happens too
  Engine engine(*model, EngineOptions{64, 16});
  std::mt19937 rng(5);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (uint32_t i = 0; i < 64; ++i) {
    auto stream = engine.submit(RequestOptions{prompt(i, 5 + static_cast<int32_t>(rng() % 60)),
                                               greedy(5 + static_cast<int32_t>(rng() % 40)),
                                               1 + static_cast<int32_t>(i % 3), -1});
    ASSERT_TRUE(stream.ok()) << stream.message();
    streams.push_back(*stream);
  }
  // Cancel half of them at random moments (some before they start, some mid-stream).
  std::vector<std::thread> readers;
  for (size_t i = 0; i < streams.size(); ++i) {
    const int cancel_after = (i % 2 == 0) ? static_cast<int>(rng() % 8) : -1;
    readers.emplace_back([stream = streams[i], cancel_after] {
      int seen = 0;
      while (!stream->done()) {
        auto event = stream->next(5000ms);
        if (event && cancel_after >= 0 && seen++ == cancel_after) stream->cancel();
      }
    });
  }
  for (auto& t : readers) t.join();
  for (auto& s : streams) EXPECT_TRUE(s->done());
  testing::expect_engine_drained(engine);
  const EngineMetrics m = engine.metrics();
  EXPECT_GT(m.requests_aborted_total, 0);
  EXPECT_EQ(m.requests_finished_total, 64);
}

TEST(Engine, RejectsBadRequestsAndAFullQueueWithTheRightCode) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load(backend, 4096);
  EngineOptions options;
  options.max_num_seqs = 1;
  options.max_queue = 2;
  options.max_model_len = 256;
  Engine engine(*model, options);
  auto too_long = engine.submit(RequestOptions{prompt(1, 200), greedy(100), 1, -1});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.message().find("maximum context length is 256 tokens"), std::string::npos)
      << too_long.message();
  EXPECT_NE(too_long.message().find("300"), std::string::npos);
  EXPECT_EQ(too_long.error().code, ErrorCode::kErrorInvalidArgument);
  auto bad_id = engine.submit(RequestOptions{{1, 9999}, greedy(4), 1, -1});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.message().find("9999"), std::string::npos);

  std::vector<std::shared_ptr<RequestStream>> accepted;
  int rejected = 0;
  for (uint32_t i = 0; i < 4; ++i) {
    auto stream = engine.submit(RequestOptions{prompt(i, 20), greedy(200), 1, -1});
    if (stream.ok()) {
      accepted.push_back(*stream);
    } else {
      EXPECT_EQ(stream.error().code, ErrorCode::kErrorResourceExhausted);
      ++rejected;
    }
  }
  EXPECT_GE(rejected, 1);
  for (auto& s : accepted) s->cancel();
  for (auto& s : accepted) {
    while (!s->done()) s->next(1000ms);
  }
  testing::expect_engine_drained(engine);
}

}  // namespace
}  // namespace specstack

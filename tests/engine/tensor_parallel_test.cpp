// Tensor parallelism on the CPU (parallel/tensor_parallel_model.h): the same
// model split over N = 2, 4, 8 thread ranks gives the N = 1 logits on every
// golden architecture, and runs unchanged under the engine — paged KV decode,
// greedy text, preemption and resume, a prefix-cache hit, copy-on-write forks.
//
// Tolerance: f32 throughout, but the split reorders sums (o_proj, down_proj
// and the embedding are all-reduced from N partial sums; the gathered vocab
// slices are exact), so logits agree to rounding, not bitwise: per row
// ||tp - ref|| / ||ref|| <= 1e-5, and the argmax agrees wherever the N = 1
// top-2 margin exceeds 1e-3.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "engine_test_util.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "parallel/shard_plan.h"
#include "parallel/tensor_parallel_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using testing::argmax;
using testing::relative_error;

constexpr double kTpTolerance = 1e-5;
constexpr float kDecisiveMargin = 1e-3f;

std::unique_ptr<ModelInstance> load(const std::string& name, Backend& backend, int64_t tp,
                                    int64_t kv_tokens = 4096) {
  ModelInstanceOptions options;
  options.kv_tokens = kv_tokens;
  options.tensor_parallel_size = tp;
  return testing::load_golden_model(name, backend, options);
}

// Why `name` cannot run at N ranks, or "" when it can.
std::string cannot_split(const std::string& name, int64_t n) {
  auto config = load_model_config(testing::golden_model_dir(name));
  SS_CHECK(config.ok());
  auto plan = ShardPlan::make(*config, n);
  return plan.ok() ? "" : plan.message();
}

std::vector<int32_t> random_ids(uint32_t seed, int32_t length, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return ids;
}

float top2_margin(const float* row, int64_t vocab) {
  float a = -1e30f;
  float b = -1e30f;
  for (int64_t i = 0; i < vocab; ++i) {
    if (row[i] > a) {
      b = a;
      a = row[i];
    } else if (row[i] > b) {
      b = row[i];
    }
  }
  return a - b;
}

void expect_logits_close(const std::vector<float>& tp, const std::vector<float>& ref, int64_t vocab,
                         const std::string& what) {
  ASSERT_EQ(tp.size(), ref.size()) << what;
  const int64_t rows = static_cast<int64_t>(ref.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = tp.data() + r * vocab;
    const float* b = ref.data() + r * vocab;
    EXPECT_LE(relative_error(a, b, vocab), kTpTolerance) << what << " row " << r;
    if (top2_margin(b, vocab) > kDecisiveMargin) {
      EXPECT_EQ(argmax(a, vocab), argmax(b, vocab)) << what << " argmax row " << r;
    }
  }
}

struct TpCase {
  std::string model;
  int64_t n;
};

void PrintTo(const TpCase& c, std::ostream* os) {
  *os << c.model << " N=" << c.n;
}

class TensorParallelLogits : public ::testing::TestWithParam<TpCase> {};

// Chunked prefill (3 steps of 16) then 8 greedy decode steps over paged KV.
TEST_P(TensorParallelLogits, PrefillAndDecodeMatchOneRank) {
  const TpCase& c = GetParam();
  if (const std::string why = cannot_split(c.model, c.n); !why.empty()) GTEST_SKIP() << why;
  CpuBackend backend(CpuBackendOptions{2});
  auto ref_model = load(c.model, backend, 1);
  auto tp_model = load(c.model, backend, c.n);
  EXPECT_NE(dynamic_cast<TensorParallelModel*>(&tp_model->model()), nullptr);
  EXPECT_EQ(tp_model->config().vocab_size, ref_model->config().vocab_size);
  const int64_t vocab = ref_model->config().vocab_size;
  const auto ids = random_ids(11, 40, vocab);
  std::vector<int32_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), 0);
  auto ref = testing::prefill_then_greedy(*ref_model, ids, positions, 40, 8, 16);
  auto tp = testing::prefill_then_greedy(*tp_model, ids, positions, 40, 8, 16);
  expect_logits_close(tp.prefill_logits, ref.prefill_logits, vocab, "prefill");
  expect_logits_close(tp.greedy_logits, ref.greedy_logits, vocab, "decode");
  EXPECT_EQ(tp.greedy, ref.greedy);
}

std::vector<TpCase> all_cases() {
  std::vector<TpCase> cases;
  for (const char* m : {"llama-gqa", "llama3-rope", "mistral-swa", "qwen2", "qwen3", "qwen3-moe",
                        "tinystories-656k"}) {
    for (int64_t n : {2, 4, 8}) cases.push_back({m, n});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelLogits, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<TpCase>& info) {
                           std::string name =
                               info.param.model + "_tp" + std::to_string(info.param.n);
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// o_proj bias (llama attention_bias: added once, by rank 0), an uneven vocab
// split (301 rows) and bf16 weights sliced by columns, on dummy weights; and
// --quantization q8_0, whose blocks of 32 inputs the column splits keep whole.
TEST(TensorParallel, DummyBf16WithOutputBiasAndUnevenVocabMatchesOneRank) {
  for (auto quantization : {WeightQuantization::kNone, WeightQuantization::kQ8_0}) {
    std::vector<testing::GoldenRun> runs;
    for (int64_t n : {1, 2, 4, 8}) {
      if (quantization != WeightQuantization::kNone && n > 2)
        continue;  // 64 / 4 < 32: blocks split
      CpuBackend backend(CpuBackendOptions{2});
      ModelInstanceOptions options;
      options.config_path = testing::test_data("configs/tiny-llama-obias.json");
      options.dummy_weights = true;
      options.dummy_seed = 99;
      options.tensor_parallel_size = n;
      options.quantization = quantization;
      auto model = ModelInstance::create(options, backend);
      ASSERT_TRUE(model.ok()) << model.message();
      ASSERT_TRUE((*model)->config().attention_bias);
      const auto ids = random_ids(3, 24, 301);
      std::vector<int32_t> positions(ids.size());
      std::iota(positions.begin(), positions.end(), 0);
      runs.push_back(testing::prefill_then_greedy(**model, ids, positions, 24, 6, 10));
      if (n > 1) {
        const std::string what =
            "N=" + std::to_string(n) + (quantization == WeightQuantization::kNone ? "" : " q8_0");
        expect_logits_close(runs.back().prefill_logits, runs[0].prefill_logits, 301,
                            what + " prefill");
        expect_logits_close(runs.back().greedy_logits, runs[0].greedy_logits, 301,
                            what + " decode");
      }
    }
  }
}

TEST(TensorParallel, GreedyTextOnTinyStoriesEqualsOneRank) {
  const std::string dir = testing::golden_model_dir("tinystories-656k");
  auto tokenizer = Tokenizer::load_dir(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  const auto prompt = tokenizer->encode("Once upon a time, there was a little girl", true);
  std::string texts[2];
  for (int64_t n : {1, 8}) {  // 8 ranks: 1 q head pair and 1 (replicated) KV head each
    CpuBackend backend(CpuBackendOptions{2});
    auto model = load("tinystories-656k", backend, n);
    Generator generator(model->runner(), model->kv_manager());
    auto result = generator.generate({{prompt, {}, testing::greedy(48)}});
    ASSERT_TRUE(result.ok()) << result.message();
    texts[n == 1 ? 0 : 1] = tokenizer->decode((*result)[0].tokens);
  }
  EXPECT_FALSE(texts[0].empty());
  EXPECT_EQ(texts[1], texts[0]);
}

// Offline greedy at one rank: the expected output of each request.
std::vector<std::vector<int32_t>> one_rank_outputs(const std::vector<GenerationRequest>& requests) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("llama-gqa", backend, 1);
  return testing::offline_outputs(*model, requests);
}

TEST(TensorParallel, EnginePreemptsAndResumesWithOneRankOutput) {
  std::vector<GenerationRequest> requests;
  for (uint32_t i = 0; i < 6; ++i) {
    requests.push_back(
        {random_ids(i, 30 + 7 * static_cast<int32_t>(i), 512), {}, testing::greedy(24)});
  }
  const auto expected = one_rank_outputs(requests);
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("llama-gqa", backend, 2, /*kv_tokens=*/160);  // 10 blocks: preemption
  Engine engine(*model, EngineOptions{/*max_num_batched_tokens=*/48, /*max_num_seqs=*/8});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : requests) {
    auto stream = engine.submit(RequestOptions{r.prompt, r.params, 1, -1});
    ASSERT_TRUE(stream.ok()) << stream.message();
    streams.push_back(*stream);
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_EQ(testing::collect(*streams[i], 1).tokens[0], expected[i]) << "request " << i;
  }
  EXPECT_GT(engine.metrics().preemptions_total, 0);
  testing::expect_engine_drained(engine);
}

TEST(TensorParallel, PrefixCacheHitAndCopyOnWriteForksKeepOneRankOutput) {
  const auto ids = random_ids(42, 100, 512);
  const auto expected = one_rank_outputs({{ids, {}, testing::greedy(16)}});
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("llama-gqa", backend, 4);  // 4 ranks: KV heads replicated
  Engine engine(*model, EngineOptions{});
  auto cold = engine.submit(RequestOptions{ids, testing::greedy(16), 1, -1});
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(testing::collect(**cold, 1).tokens[0], expected[0]);
  EXPECT_EQ((*cold)->stats().cached_tokens, 0);
  // Two greedy choices share the cached prompt blocks; the partial last block
  // is copied on write (on every rank) before each choice writes into it.
  auto warm = engine.submit(RequestOptions{ids, testing::greedy(16), 2, -1});
  ASSERT_TRUE(warm.ok());
  testing::Collected forks = testing::collect(**warm, 2);
  EXPECT_EQ((*warm)->stats().cached_tokens, 96);  // 6 full blocks of 16
  EXPECT_EQ(forks.tokens[0], expected[0]);
  EXPECT_EQ(forks.tokens[1], expected[0]);
  testing::expect_engine_drained(engine);
}

TEST(TensorParallel, CapturedQueriesComeBackInFullHeadOrder) {
  CpuBackend backend(CpuBackendOptions{2});
  auto ref_model = load("qwen3", backend, 1);
  auto tp_model = load("qwen3", backend, 2);
  const auto ids = random_ids(5, 20, 512);
  Tensor captured[2];
  int k = 0;
  for (ModelInstance* model : {ref_model.get(), tp_model.get()}) {
    KvSequence seq = model->kv_manager().new_sequence(KvSequenceOptions{0, false});
    StepPlan plan;
    const int32_t first = model->kv_manager().append(seq, 20);
    for (int32_t i = 0; i < 20; ++i) plan.add_token(ids[size_t(i)], i, 0, first + i, i == 19);
    plan.block_tables.push_back(seq.blocks());
    plan.seq_n_slots.push_back(seq.n_slots());
    plan.capture_rows = {3, 10, 19};
    StepOutput out = model->runner().run(plan);
    captured[k++] = out.captured_queries;
    model->kv_manager().free(seq);
  }
  ASSERT_EQ(captured[1].shape(), captured[0].shape());
  EXPECT_LE(relative_error(captured[1].f32(), captured[0].f32(), captured[0].numel()), 1e-5);
}

TEST(TensorParallel, CudaAndBadSizesAreOneLineErrors) {
  CpuBackend backend(CpuBackendOptions{1});
  ModelInstanceOptions options;
  options.model_dir = testing::golden_model_dir("llama-gqa");
  options.tensor_parallel_size = 2;
  options.device = Device::kCuda;
  auto cuda = ModelInstance::create(options, backend);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.message(),
            "tensor parallelism on CUDA needs NCCL rank models: not built yet (issue 13)");
  options.device = Device::kCpu;
  options.tensor_parallel_size = 3;
  auto three = ModelInstance::create(options, backend);
  ASSERT_FALSE(three.ok());
  EXPECT_EQ(three.message(), "--tensor-parallel-size 3: it does not divide the 8 attention heads");
  options.tensor_parallel_size = 0;
  EXPECT_FALSE(ModelInstance::create(options, backend).ok());
}

TEST(TensorParallel, SplitsTheThreadBudgetAndTheKvCache) {
  CpuBackend backend(CpuBackendOptions{2});
  auto model = load("llama-gqa", backend, 4, /*kv_tokens=*/256);
  auto* tp = dynamic_cast<TensorParallelModel*>(&model->model());
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->threads_per_rank(), 1);  // 2 threads over 4 ranks: 1 each (never fewer)
  auto* kv = dynamic_cast<ShardedKvCache*>(&model->kv());
  ASSERT_NE(kv, nullptr);
  ASSERT_EQ(kv->n_ranks(), 4);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(kv->rank(r).shape().n_kv_heads, 1);  // 2 KV heads replicated over 4 ranks
    EXPECT_EQ(kv->rank(r).shape().n_blocks, 16);
  }
  EXPECT_EQ(kv->nbytes(), 4 * kv->rank(0).nbytes());
  // o_proj has no bias here; weights add up to the full model's plus replication (norms).
  EXPECT_GT(tp->weight_bytes(), 0u);
}

}  // namespace
}  // namespace specstack

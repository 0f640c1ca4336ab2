// Sampled requests on the GPU pick their tokens in the sampling kernel
// (StepPlan::tokens_on_device with each row's RowSampling): no logits row
// comes down. On one CUDA model, requests that ask for logprobs sample on the
// host from downloaded logits (and the host masks constrained ones); the same
// requests without logprobs are picked on the device. Their laws must agree
// (chi-square homogeneity, unconstrained with temperature / top-k / top-p /
// min-p, and under a position-dependent grammar whose masks go up as
// bitmasks), a seeded batch gives the same tokens twice, and every picked
// constrained document is in the grammar. On the llama-gqa golden model with
// the 512-token byte-level JSON tokenizer. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "../engine/chi_square.h"
#include "../engine/engine_test_util.h"
#include "../engine/golden_run.h"
#include "../engine/json_bytes_grammar.h"
#include "../engine/sampling_law.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "grammar/gbnf_parser.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

struct Fixture {
  CpuBackend backend{CpuBackendOptions{1}};
  std::unique_ptr<ModelInstance> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    options.device = Device::kCuda;
    options.graph_max_context = 1024;
    fx->model = testing::load_golden_model("llama-gqa", fx->backend, options);
    testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
    fx->tokenizer = std::move(v.tokenizer);
    fx->vocabulary = std::move(v.vocabulary);
    return fx;
  }();
  return *f;
}

RequestOptions request(int32_t max_tokens, uint64_t seed, bool on_host) {
  RequestOptions options;
  options.prompt = fixture().tokenizer->encode("Once upon a time", true);
  options.params.max_tokens = max_tokens;
  options.params.temperature = 1.0f;
  options.params.seed = seed;
  // Logprobs make the row a host row: its logits come down.
  if (on_host) options.top_logprobs = 0;
  return options;
}

void expect_same_law(const std::function<RequestOptions(uint64_t, bool)>& make, int n_requests,
                     const std::function<size_t(const std::vector<int32_t>&)>& cell_of,
                     size_t n_cells) {
  EngineOptions options;
  options.max_queue = n_requests;
  Engine engine(*fixture().model, options);
  const std::vector<int64_t> host = testing::sample_cells(
      engine, [&](uint64_t seed) { return make(seed, true); }, n_requests, 1, cell_of, n_cells);
  const std::vector<int64_t> device = testing::sample_cells(
      engine, [&](uint64_t seed) { return make(seed, false); }, n_requests, 1'000'000, cell_of,
      n_cells);
  const ChiSquareFit fit = chi_square_homogeneity(host, device);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
  testing::expect_engine_drained(engine);
}

TEST(CudaTokenPicking, SampledLawEqualsHostSampling) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  std::vector<int32_t> top;  // the first token's ten most likely values
  {
    RequestOptions probe = request(1, 1, true);
    probe.params.temperature = 0.0f;
    probe.top_logprobs = 10;
    Engine engine(*f.model, EngineOptions{});
    for (const auto& [token, logprob] : testing::run_all(engine, {probe})[0].logprobs[0][0].top) {
      top.push_back(token);
    }
  }
  ASSERT_EQ(top.size(), 10u);
  const auto make = [&](uint64_t seed, bool on_host) {
    RequestOptions options = request(2, seed, on_host);
    options.params.ignore_eos = true;
    options.params.top_k = 30;
    options.params.top_p = 0.7f;
    options.params.min_p = 0.03f;
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::first_two_cell(top, tokens);
  };
  expect_same_law(make, 3000, cell_of, 22);
}

TEST(CudaTokenPicking, ConstrainedSampledLawEqualsHostSampling) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  auto g = grammar::parse_gbnf(testing::kThreePositionGrammar);
  ASSERT_TRUE(g.ok()) << g.message();
  const auto constraint = std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(g).value()), f.vocabulary);
  const auto make = [&](uint64_t seed, bool on_host) {
    RequestOptions options = request(8, seed, on_host);
    options.constraint = constraint;
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::three_position_cell(f.tokenizer->decode(tokens, true));
  };
  expect_same_law(make, 3000, cell_of, testing::kThreePositionCells);
}

// The kernel is deterministic and each row's uniform is its own request's:
// the same seeded batch twice gives the same tokens (no prefix cache: both
// runs prefill in the same shapes, so the logits are the same).
TEST(CudaTokenPicking, SeededBatchIsReproducible) {
  SS_REQUIRE_GPU();
  EngineOptions options;
  options.enable_prefix_caching = false;
  Engine engine(*fixture().model, options);
  std::vector<RequestOptions> batch;
  for (int i = 0; i < 16; ++i) {
    RequestOptions options = request(24, 500 + static_cast<uint64_t>(i), i % 5 == 0);
    options.params.ignore_eos = true;
    options.params.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    options.params.top_k = i % 3 == 0 ? 20 : 0;
    batch.push_back(std::move(options));
  }
  const std::vector<testing::RequestOutput> first = testing::run_all(engine, batch);
  const std::vector<testing::RequestOutput> second = testing::run_all(engine, batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(first[i].tokens, second[i].tokens) << "request " << i;
    EXPECT_EQ(first[i].tokens[0].size(), 24u);
  }
  testing::expect_engine_drained(engine);
}

}  // namespace
}  // namespace specstack

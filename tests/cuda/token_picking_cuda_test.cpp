// Sampled requests on the GPU pick their tokens in the sampling kernel
// (StepPlan::tokens_on_device with each row's RowSampling), and requests
// asking for logprobs get them computed there too: no logits row comes down.
// Against the same weights loaded with TokenPicking::kNever (every row's
// logits come down, the host samples and masks): the laws agree (chi-square
// homogeneity, unconstrained with temperature / top-k / top-p / min-p, and
// under a position-dependent grammar whose masks go up as bitmasks), greedy
// logprobs requests give the same tokens and logprobs, a seeded request
// gives the same tokens twice, and every picked constrained document is in the
// grammar. On the llama-gqa golden model with the 512-token byte-level JSON
// tokenizer. Skips without a GPU.
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
  std::unique_ptr<ModelInstance> model;       // picks on the device
  std::unique_ptr<ModelInstance> host_model;  // the same weights, every row sampled on the host
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
    options.token_picking = TokenPicking::kNever;
    fx->host_model = testing::load_golden_model("llama-gqa", fx->backend, options);
    testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
    fx->tokenizer = std::move(v.tokenizer);
    fx->vocabulary = std::move(v.vocabulary);
    return fx;
  }();
  return *f;
}

RequestOptions request(int32_t max_tokens, uint64_t seed) {
  RequestOptions options;
  options.prompt = fixture().tokenizer->encode("Once upon a time", true);
  options.params.max_tokens = max_tokens;
  options.params.temperature = 1.0f;
  options.params.seed = seed;
  return options;
}

void expect_same_law(const std::function<RequestOptions(uint64_t)>& make, int n_requests,
                     const std::function<size_t(const std::vector<int32_t>&)>& cell_of,
                     size_t n_cells) {
  EngineOptions options;
  options.max_queue = n_requests;
  Engine host_engine(*fixture().host_model, options);
  Engine engine(*fixture().model, options);
  const std::vector<int64_t> host =
      testing::sample_cells(host_engine, make, n_requests, 1, cell_of, n_cells);
  const std::vector<int64_t> device =
      testing::sample_cells(engine, make, n_requests, 1'000'000, cell_of, n_cells);
  const ChiSquareFit fit = chi_square_homogeneity(host, device);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
  testing::expect_engine_drained(engine);
  testing::expect_engine_drained(host_engine);
}

TEST(CudaTokenPicking, SampledLawEqualsHostSampling) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  Engine probe_engine(*f.model, EngineOptions{});
  const std::vector<int32_t> top =
      testing::most_likely_first_tokens(probe_engine, request(1, 1), 10);
  ASSERT_EQ(top.size(), 10u);
  const auto make = [&](uint64_t seed) {
    RequestOptions options = request(2, seed);
    options.params.ignore_eos = true;
    testing::set_law_filters(options.params);
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
  const auto make = [&](uint64_t seed) {
    RequestOptions options = request(8, seed);
    options.constraint = constraint;
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::three_position_cell(f.tokenizer->decode(tokens, true));
  };
  expect_same_law(make, 3000, cell_of, testing::kThreePositionCells);
}

// The kernel is deterministic and each row's uniform is its own request's:
// a seeded request run alone twice (the same steps, so the same logits)
// gives the same tokens. (Submitted together, requests may share their first
// steps differently from run to run, and bf16 logits move with the batch.)
TEST(CudaTokenPicking, SeededRequestIsReproducible) {
  SS_REQUIRE_GPU();
  Engine engine(*fixture().model, EngineOptions{});
  for (int i = 0; i < 6; ++i) {
    RequestOptions options = request(24, 500 + static_cast<uint64_t>(i));
    options.params.ignore_eos = true;
    options.params.top_p = i % 2 == 0 ? 0.9f : 1.0f;
    options.params.top_k = i % 3 == 0 ? 20 : 0;
    if (i == 5) options.top_logprobs = 5;
    const testing::RequestOutput first = testing::run_all(engine, {options})[0];
    const testing::RequestOutput second = testing::run_all(engine, {options})[0];
    EXPECT_EQ(first.tokens, second.tokens) << "request " << i;
    EXPECT_EQ(first.tokens[0].size(), 24u);
  }
  testing::expect_engine_drained(engine);
}

// Greedy requests with logprobs, one at a time (the same step shapes, so the
// same logits on both models): the device's picks and logprobs equal the
// host's, which come from downloaded logits.
TEST(CudaTokenPicking, LogprobsComputedOnTheDeviceEqualTheHosts) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  Engine device(*f.model, EngineOptions{});
  Engine host(*f.host_model, EngineOptions{});
  for (int32_t top : {0, 1, 7, 20}) {
    RequestOptions options = request(12, 1);
    options.params.temperature = 0.0f;
    options.params.ignore_eos = true;
    options.top_logprobs = top;
    const testing::RequestOutput got = testing::run_all(device, {options})[0];
    const testing::RequestOutput want = testing::run_all(host, {options})[0];
    ASSERT_EQ(got.tokens, want.tokens) << "top " << top;
    ASSERT_EQ(got.logprobs[0].size(), 12u);
    for (size_t t = 0; t < 12; ++t) {
      const TokenLogprob& g = got.logprobs[0][t];
      const TokenLogprob& w = want.logprobs[0][t];
      EXPECT_NEAR(g.logprob, w.logprob, 1e-5);
      ASSERT_EQ(g.top.size(), size_t(top));
      for (size_t k = 0; k < g.top.size(); ++k) {
        EXPECT_EQ(g.top[k].first, w.top[k].first) << "token " << t << " rank " << k;
        EXPECT_NEAR(g.top[k].second, w.top[k].second, 1e-5);
      }
    }
  }
  testing::expect_engine_drained(device);
}

}  // namespace
}  // namespace specstack

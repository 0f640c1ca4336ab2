// The engine's tokens_on_device path (StepPlan::tokens_on_device, as on a
// GPU) without a GPU: a model loaded with TokenPicking::kAlways has its steps
// planned as a GPU's, and the runner picks tokens by the device's rule
// (model/row_sampling.h). Against an engine on the same weights that samples
// every row on the host: greedy output is equal token for token (constrained
// too); sampled output is distributed the same (chi-square homogeneity,
// unconstrained with every filter and under a position-dependent grammar);
// a seeded request gives the same tokens alone and inside a batch of other
// requests; picked rows with logprobs get them from the model; rows the host
// must sample (penalties, the row n > 1 choices fork from) share steps with
// picked rows and keep their output; every KV block comes back.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "chi_square.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "golden_run.h"
#include "grammar/gbnf_parser.h"
#include "grammar_test_schemas.h"
#include "json_bytes_grammar.h"
#include "sampling_law.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

struct Fixture {
  CpuBackend backend{CpuBackendOptions{2}};
  std::unique_ptr<ModelInstance> host;    // samples every row from its logits
  std::unique_ptr<ModelInstance> picker;  // plans steps as a GPU (TokenPicking::kAlways)
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    fx->host = testing::load_golden_model("llama-gqa", fx->backend, options);
    options.token_picking = TokenPicking::kAlways;
    fx->picker = testing::load_golden_model("llama-gqa", fx->backend, options);
    testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
    fx->tokenizer = std::move(v.tokenizer);
    fx->vocabulary = std::move(v.vocabulary);
    return fx;
  }();
  return *f;
}

using testing::RequestOutput;
using testing::run_all;

RequestOptions request(const std::string& prompt, int32_t max_tokens, float temperature,
                       uint64_t seed) {
  RequestOptions options;
  options.prompt = fixture().tokenizer->encode(prompt, true);
  options.params.max_tokens = max_tokens;
  options.params.temperature = temperature;
  options.params.ignore_eos = true;
  options.params.seed = seed;
  return options;
}

std::shared_ptr<grammar::TokenConstraint> gbnf_constraint(const char* text) {
  auto g = grammar::parse_gbnf(text);
  SS_CHECK_MSG(g.ok(), g.ok() ? "" : g.message());
  return std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(g).value()), fixture().vocabulary);
}

const char* const kPrompts[] = {"Once upon a time", "Tom had a ball", "The JSON said {"};

TEST(TokenPicking, GreedyEqualsHostSampling) {
  Fixture& f = fixture();
  Engine host(*f.host, EngineOptions{});
  Engine picker(*f.picker, EngineOptions{});
  std::vector<RequestOptions> requests;
  for (int i = 0; i < 6; ++i) {
    RequestOptions options = request(kPrompts[i % 3], 24, 0.0f, 1);
    if (i >= 3) {
      options.params.ignore_eos = false;
      options.params.max_tokens = 200;
      options.constraint = testing::schema_constraint(
          Json::parse(
              testing::kGrammarTestSchemas[size_t(i) % std::size(testing::kGrammarTestSchemas)]),
          f.vocabulary);
    }
    requests.push_back(std::move(options));
  }
  const std::vector<RequestOutput> want = run_all(host, requests);
  const std::vector<RequestOutput> got = run_all(picker, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
    EXPECT_EQ(got[i].finish, want[i].finish) << "request " << i;
  }
  testing::expect_engine_drained(picker);
}

// A seeded request's tokens do not depend on its neighbours: alone, and in a
// batch with host rows (logprobs, penalties, n > 1) and other picked rows.
TEST(TokenPicking, SeededOutputIsTheSameAloneAndInABatch) {
  Fixture& f = fixture();
  Engine picker(*f.picker, EngineOptions{});
  RequestOptions seeded = request(kPrompts[0], 32, 0.9f, 4242);
  seeded.params.top_p = 0.95f;
  seeded.params.min_p = 0.02f;
  const RequestOutput alone = run_all(picker, {seeded})[0];
  std::vector<RequestOptions> batch;
  for (int i = 0; i < 6; ++i) {
    RequestOptions other = request(kPrompts[i % 3], 20 + i, 1.0f, 10 + static_cast<uint64_t>(i));
    if (i == 1) other.top_logprobs = 2;
    if (i == 2) other.params.frequency_penalty = 0.5f;
    if (i == 3) other.n = 3;
    if (i == 4) other.params.temperature = 0.0f;
    batch.push_back(std::move(other));
  }
  batch.insert(batch.begin() + 3, seeded);
  const std::vector<RequestOutput> together = run_all(picker, batch);
  EXPECT_EQ(together[3].tokens, alone.tokens);
  EXPECT_EQ(together[3].tokens[0].size(), 32u);
  testing::expect_engine_drained(picker);
}

// Picked rows bring their logprobs with them (computed by the model, not
// from downloaded logits) and rows the host samples keep doing so inside
// picked steps: with the same neighbours and seeds, greedy logprobs rows give
// the host engine's tokens and logprobs (to the last bits the batching may
// move) and penalised sampled rows its tokens.
TEST(TokenPicking, LogprobsComeWithPickedTokensAndHostRowsKeepTheirOutput) {
  Fixture& f = fixture();
  Engine host(*f.host, EngineOptions{});
  Engine picker(*f.picker, EngineOptions{});
  std::vector<RequestOptions> batch;
  for (int i = 0; i < 9; ++i) {
    RequestOptions options = request(kPrompts[i % 3], 16, 0.8f, 300 + static_cast<uint64_t>(i));
    if (i % 3 == 0) {  // picked, with logprobs (0, 3, 20 alternatives)
      options.params.temperature = 0.0f;
      options.top_logprobs = i == 0 ? 0 : i == 3 ? 3 : 20;
    }
    if (i % 3 == 1) options.params.presence_penalty = 0.7f;  // host: penalties
    batch.push_back(std::move(options));                     // i % 3 == 2: picked, sampled
  }
  const std::vector<RequestOutput> want = run_all(host, batch);
  const std::vector<RequestOutput> got = run_all(picker, batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i % 3 == 2) continue;
    SCOPED_TRACE(::testing::Message() << "request " << i);
    EXPECT_EQ(got[i].tokens, want[i].tokens);
    ASSERT_EQ(got[i].logprobs[0].size(), i % 3 == 0 ? 16u : 0u);
    ASSERT_EQ(want[i].logprobs[0].size(), got[i].logprobs[0].size());
    for (size_t t = 0; t < got[i].logprobs[0].size(); ++t) {
      const TokenLogprob& g = got[i].logprobs[0][t];
      const TokenLogprob& w = want[i].logprobs[0][t];
      EXPECT_EQ(g.token, got[i].tokens[0][t]);
      EXPECT_NEAR(g.logprob, w.logprob, 1e-4);
      ASSERT_EQ(g.top.size(), size_t(batch[i].top_logprobs));
      ASSERT_EQ(w.top.size(), g.top.size());
      for (size_t k = 0; k < g.top.size(); ++k) {
        EXPECT_EQ(g.top[k].first, w.top[k].first);
        EXPECT_NEAR(g.top[k].second, w.top[k].second, 1e-4);
      }
    }
  }
  testing::expect_engine_drained(picker);
}

// Cells of the first three tokens' law: the host engine's counts against the
// picking engine's (different seeds: independent samples).
void expect_same_law(const std::function<RequestOptions(uint64_t)>& make, int n_requests,
                     const std::function<size_t(const std::vector<int32_t>&)>& cell_of,
                     size_t n_cells) {
  Fixture& f = fixture();
  const auto sample = [&](ModelInstance& model, uint64_t seed) {
    EngineOptions options;
    options.max_queue = n_requests;
    Engine engine(model, options);
    std::vector<int64_t> counts =
        testing::sample_cells(engine, make, n_requests, seed, cell_of, n_cells);
    testing::expect_engine_drained(engine);
    return counts;
  };
  const std::vector<int64_t> expected = sample(*f.host, 1);
  const std::vector<int64_t> observed = sample(*f.picker, 1'000'000);
  const ChiSquareFit fit = chi_square_homogeneity(expected, observed);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
}

// Unconstrained, every filter at once: the first token's law over the ten
// most likely first tokens (and "other") and the second's parity.
TEST(TokenPicking, SampledLawEqualsHostSampling) {
  Fixture& f = fixture();
  Engine probe_engine(*f.host, EngineOptions{});
  const std::vector<int32_t> top =
      testing::most_likely_first_tokens(probe_engine, request(kPrompts[0], 1, 0.0f, 1), 10);
  ASSERT_EQ(top.size(), 10u);
  const auto make = [&](uint64_t seed) {
    RequestOptions options = request(kPrompts[0], 2, 1.0f, seed);
    testing::set_law_filters(options.params);
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::first_two_cell(top, tokens);
  };
  expect_same_law(make, 3000, cell_of, 22);
}

// Under a grammar whose three positions admit different characters: each
// picked row must be masked with its own parser state.
TEST(TokenPicking, ConstrainedSampledLawEqualsHostSampling) {
  Fixture& f = fixture();
  const auto constraint = gbnf_constraint(testing::kThreePositionGrammar);
  const auto make = [&](uint64_t seed) {
    RequestOptions options = request(kPrompts[0], 8, 1.0f, seed);
    options.params.ignore_eos = false;
    options.constraint = constraint;
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::three_position_cell(f.tokenizer->decode(tokens, true));
  };
  expect_same_law(make, 3000, cell_of, testing::kThreePositionCells);
}

}  // namespace
}  // namespace specstack

// Sampled speculative decoding on the GPU: the draft (CUDA) draws sampled
// draft tokens in the sampling kernel and keeps their logit rows on the
// device; the target (CUDA) verifies them in cuda/verification.cu, so no
// logits row comes down. Against the same pair loaded with
// TokenPicking::kNever (every row to the host, the engine's Sampler and
// verify_stochastic decide): seeded requests give the same tokens (up to a
// uniform within rounding of a boundary), the law of the first three tokens
// equals plain sampling's without a draft (chi-square homogeneity), and
// every such verification is counted as a device one (logprobs requests
// included: the logprobs of the emitted tokens come from the device and
// equal the host path's). llama-gqa target,
// llama3-rope draft (golden models). Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>

#include "../engine/chi_square.h"
#include "../engine/engine_test_util.h"
#include "../engine/golden_reference.h"
#include "../engine/golden_run.h"
#include "../engine/sampling_law.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"

namespace specstack {
namespace {

struct Fixture {
  CpuBackend backend{CpuBackendOptions{1}};
  std::unique_ptr<ModelInstance> target, draft;            // pick, keep and verify on the GPU
  std::unique_ptr<ModelInstance> host_target, host_draft;  // every row to the host
  std::vector<int32_t> prompt;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    options.device = Device::kCuda;
    options.graph_max_context = 1024;
    fx->target = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->draft = testing::load_golden_model("llama3-rope", fx->backend, options);
    options.token_picking = TokenPicking::kNever;
    fx->host_target = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->host_draft = testing::load_golden_model("llama3-rope", fx->backend, options);
    testing::GoldenReference ref(testing::golden_model_dir("llama-gqa") + "/reference.safetensors");
    fx->prompt = ref.ids("p1.input_ids");
    return fx;
  }();
  return *f;
}

EngineOptions spec_options(ModelInstance* draft, int n_requests) {
  EngineOptions options;
  options.specdecode.draft = draft;
  options.specdecode.max_draft_tokens = 4;
  options.specdecode.adaptive = false;
  options.max_queue = n_requests;
  return options;
}

RequestOptions sampled(uint64_t seed, int32_t max_tokens, bool all_filters) {
  RequestOptions options;
  options.prompt = fixture().prompt;
  options.params.max_tokens = max_tokens;
  options.params.ignore_eos = true;
  options.params.seed = seed;
  options.params.temperature = 1.0f;
  if (all_filters) testing::set_law_filters(options.params);
  return options;
}

TEST(CudaDeviceVerification, SeededOutputEqualsTheHostPath) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  constexpr int kRequests = 48;
  std::vector<RequestOptions> requests;
  for (int r = 0; r < kRequests; ++r) {
    requests.push_back(sampled(100 + r, 16, false));
    if (r % 2 == 1) requests.back().params.min_p = 0.05f;
    if (r % 3 == 0) requests.back().top_logprobs = r % 4;  // computed on the device too
  }
  Engine host(*f.host_target, spec_options(f.host_draft.get(), kRequests));
  Engine device(*f.target, spec_options(f.draft.get(), kRequests));
  const auto want = testing::run_all(host, requests);
  const auto got = testing::run_all(device, requests);
  int same = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_EQ(got[i].tokens[0].size(), 16u);
    same += got[i].tokens[0] == want[i].tokens[0];
    if (requests[i].top_logprobs < 0 || got[i].tokens[0] != want[i].tokens[0]) continue;
    ASSERT_EQ(got[i].logprobs[0].size(), 16u);
    for (size_t t = 0; t < 16; ++t) {
      const TokenLogprob& g = got[i].logprobs[0][t];
      const TokenLogprob& w = want[i].logprobs[0][t];
      EXPECT_EQ(g.token, got[i].tokens[0][t]);
      EXPECT_NEAR(g.logprob, w.logprob, 1e-4);
      ASSERT_EQ(g.top.size(), size_t(requests[i].top_logprobs));
      for (size_t a = 0; a < g.top.size() && a < w.top.size(); ++a) {
        EXPECT_EQ(g.top[a].first, w.top[a].first);
        EXPECT_NEAR(g.top[a].second, w.top[a].second, 1e-4);
      }
    }
  }
  std::printf("  %d of %zu seeded streams identical\n", same, requests.size());
  EXPECT_GE(same, kRequests * 9 / 10);
  const EngineMetrics d = device.metrics();
  EXPECT_EQ(d.specdecode_device_verify_total, d.specdecode_verify_total);
  EXPECT_GT(d.specdecode_device_verify_total, kRequests);
  EXPECT_EQ(host.metrics().specdecode_device_verify_total, 0);
  testing::expect_engine_drained(host);
  testing::expect_engine_drained(device);
}

TEST(CudaDeviceVerification, SampledLawEqualsPlainSampling) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  constexpr int kRequests = 2000;
  EngineOptions plain_options;
  plain_options.max_queue = kRequests + 1;  // the probe request may not have left yet
  Engine plain(*f.host_target, plain_options);
  const std::vector<int32_t> top =
      testing::most_likely_first_tokens(plain, sampled(1, 1, false), 10);
  ASSERT_EQ(top.size(), 10u);
  const auto make = [&](uint64_t seed) { return sampled(seed, 3, true); };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::first_two_cell(top, tokens) * 2 + static_cast<size_t>(tokens.at(2) % 2);
  };
  const std::vector<int64_t> expected =
      testing::sample_cells(plain, make, kRequests, 1, cell_of, 44);
  Engine device(*f.target, spec_options(f.draft.get(), kRequests));
  const std::vector<int64_t> observed =
      testing::sample_cells(device, make, kRequests, 1'000'000, cell_of, 44);
  const ChiSquareFit fit = chi_square_homogeneity(expected, observed);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
  EXPECT_GT(device.metrics().specdecode_device_verify_total, kRequests / 2);
  testing::expect_engine_drained(device);
}

}  // namespace
}  // namespace specstack

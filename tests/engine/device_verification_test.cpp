// Sampled speculative decoding as it runs on a GPU, without one: target and
// draft loaded with TokenPicking::kAlways, so the draft draws sampled draft
// tokens where it picks tokens and keeps their logit rows there
// (StepPlan::keep_rows), and the target's runner verifies them by the
// device's rule (StepPlan::verifications, model/row_verification.h) instead
// of the engine's Sampler. Against the host path (the same pair sampling
// everything from downloaded logits): seeded requests give the same tokens
// (the same uniforms are used in the same order on both paths, so only a
// draw within rounding of a boundary may differ; without top-k / top-p, where
// the host walks tokens in id order too), and the output's law is
// plain sampling's (chi-square homogeneity against an engine without a
// draft). Every verification of such requests is counted as a device one,
// and the logprobs of the tokens it emitted (the target's, computed where
// the tokens are picked) equal the host path's; a request the device cannot
// verify (penalties) shares the steps and verifies on the host; both pools
// drain.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "chi_square.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "sampling_law.h"

namespace specstack {
namespace {

struct Pair {
  std::unique_ptr<ModelInstance> target;
  std::unique_ptr<ModelInstance> draft;
};

struct Fixture {
  CpuBackend backend{CpuBackendOptions{2}};
  Pair host;     // every row's logits come back; the engine's Sampler picks
  Pair devices;  // planned as on a GPU: picks, keeps and verifies in the runner
  std::vector<int32_t> prompt;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    fx->host.target = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->host.draft = testing::load_golden_model("llama3-rope", fx->backend, options);
    options.token_picking = TokenPicking::kAlways;
    fx->devices.target = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->devices.draft = testing::load_golden_model("llama3-rope", fx->backend, options);
    testing::GoldenReference ref(testing::golden_model_dir("llama-gqa") + "/reference.safetensors");
    fx->prompt = ref.ids("p1.input_ids");
    return fx;
  }();
  return *f;
}

EngineOptions spec_options(ModelInstance& draft, int n_requests) {
  EngineOptions options;
  options.specdecode.draft = &draft;
  options.specdecode.max_draft_tokens = 4;
  options.specdecode.adaptive = false;  // every step speculates
  options.max_queue = n_requests;
  return options;
}

RequestOptions sampled(uint64_t seed, int32_t max_tokens, int variant) {
  RequestOptions options;
  options.prompt = fixture().prompt;
  options.params.max_tokens = max_tokens;
  options.params.ignore_eos = true;
  options.params.seed = seed;
  options.params.temperature = 1.0f;
  switch (variant % 4) {  // every filter, alone and together
    case 1:
      options.params.min_p = 0.05f;
      break;
    case 2:
      options.params.top_k = 20;
      options.params.top_p = 0.8f;
      break;
    case 3:
      testing::set_law_filters(options.params);
      break;
    default:
      break;
  }
  return options;
}

TEST(DeviceVerification, SeededOutputEqualsTheHostPath) {
  Fixture& f = fixture();
  constexpr int kRequests = 48;
  std::vector<RequestOptions> requests;
  // Without top-k / top-p: the host's Sampler::sample walks candidates best
  // first there, so only the law would agree (SampledLawEqualsPlainSampling).
  for (int r = 0; r < kRequests; ++r) {
    requests.push_back(sampled(100 + r, 16, r % 2));
    if (r % 3 == 0) requests.back().top_logprobs = r % 4;  // 0 .. 3 alternatives
  }
  // One the device cannot verify, in the same steps: penalties.
  RequestOptions penalised = sampled(7, 16, 0);
  penalised.params.presence_penalty = 0.5f;
  requests.push_back(penalised);

  Engine host(*f.host.target, spec_options(*f.host.draft, kRequests + 1));
  Engine devices(*f.devices.target, spec_options(*f.devices.draft, kRequests + 1));
  const auto want = testing::run_all(host, requests);
  const auto got = testing::run_all(devices, requests);
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
      ASSERT_EQ(g.top.size(), w.top.size());
      for (size_t a = 0; a < g.top.size(); ++a) {
        EXPECT_EQ(g.top[a].first, w.top[a].first);
        EXPECT_NEAR(g.top[a].second, w.top[a].second, 1e-4);
      }
    }
  }
  std::printf("  %d of %zu seeded streams identical\n", same, requests.size());
  EXPECT_GE(same, static_cast<int>(requests.size()) * 9 / 10);

  const EngineMetrics h = host.metrics();
  const EngineMetrics d = devices.metrics();
  EXPECT_EQ(h.specdecode_device_verify_total, 0);
  EXPECT_GT(d.specdecode_device_verify_total, kRequests);
  // Only the penalised request's verifications are not device ones.
  EXPECT_GT(d.specdecode_verify_total, d.specdecode_device_verify_total);
  EXPECT_LE(d.specdecode_verify_total - d.specdecode_device_verify_total, 16);
  EXPECT_GT(d.specdecode_accepted_tokens_total, 0);
  EXPECT_LT(d.specdecode_accepted_tokens_total, d.specdecode_draft_tokens_total);
  testing::expect_engine_drained(host);
  testing::expect_engine_drained(devices);
}

// The law of the first three tokens (the second and third come from
// verifications: draft tokens accepted, residual draws, bonus tokens)
// against plain sampling without a draft, with every filter.
TEST(DeviceVerification, SampledLawEqualsPlainSampling) {
  Fixture& f = fixture();
  constexpr int kRequests = 2000;
  EngineOptions plain_options;
  plain_options.max_queue = kRequests + 1;  // the probe request may not have left yet
  Engine probe(*f.host.target, plain_options);
  RequestOptions probe_request = sampled(1, 1, 0);
  const std::vector<int32_t> top = testing::most_likely_first_tokens(probe, probe_request, 10);
  ASSERT_EQ(top.size(), 10u);
  const auto make = [&](uint64_t seed) {
    RequestOptions options = sampled(seed, 3, 3);
    return options;
  };
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return testing::first_two_cell(top, tokens) * 2 + static_cast<size_t>(tokens.at(2) % 2);
  };
  const std::vector<int64_t> expected =
      testing::sample_cells(probe, make, kRequests, 1, cell_of, 44);
  Engine devices(*f.devices.target, spec_options(*f.devices.draft, kRequests));
  const std::vector<int64_t> observed =
      testing::sample_cells(devices, make, kRequests, 1'000'000, cell_of, 44);
  const ChiSquareFit fit = chi_square_homogeneity(expected, observed);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
  EXPECT_GT(devices.metrics().specdecode_device_verify_total, kRequests / 2);
  testing::expect_engine_drained(devices);
}

}  // namespace
}  // namespace specstack

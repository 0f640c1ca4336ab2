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
// drain, after preemption and cancellation mid-speculation too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/cpu/cpu_backend.h"
#include "device_verification_cases.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "golden_reference.h"
#include "golden_run.h"

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

using testing::fixed_k_spec_options;

TEST(DeviceVerification, SeededOutputEqualsTheHostPath) {
  Fixture& f = fixture();
  constexpr int kRequests = 48;
  std::vector<RequestOptions> requests;
  for (int r = 0; r < kRequests; ++r) {
    requests.push_back(testing::seeded_sampled(f.prompt, 100 + r, 16));
    if (r % 2 == 1) requests.back().params.min_p = 0.05f;
    if (r % 3 == 0) requests.back().top_logprobs = r % 4;  // 0 .. 3 alternatives
  }
  // One the device cannot verify, in the same steps: penalties.
  requests.push_back(testing::seeded_sampled(f.prompt, 7, 16));
  requests.back().params.presence_penalty = 0.5f;

  Engine host(*f.host.target, fixed_k_spec_options(f.host.draft.get(), kRequests + 1));
  Engine devices(*f.devices.target, fixed_k_spec_options(f.devices.draft.get(), kRequests + 1));
  testing::expect_seeded_streams_match(host, devices, requests, 1e-4);
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

TEST(DeviceVerification, SampledLawEqualsPlainSampling) {
  Fixture& f = fixture();
  constexpr int kRequests = 2000;
  EngineOptions plain_options;
  plain_options.max_queue = kRequests + 1;  // the probe request may not have left yet
  Engine plain(*f.host.target, plain_options);
  Engine devices(*f.devices.target, fixed_k_spec_options(f.devices.draft.get(), kRequests));
  testing::expect_law_equals_plain(plain, devices, kRequests, [&](uint64_t seed) {
    RequestOptions options = testing::seeded_sampled(f.prompt, seed, 3);
    testing::set_law_filters(options.params);
    return options;
  });
  EXPECT_GT(devices.metrics().specdecode_device_verify_total, kRequests / 2);
  testing::expect_engine_drained(devices);
}

// Preemption and cancellation while drafts are kept for the device
// verification: a target pool of 12 blocks of 16 cannot hold four requests
// of 50 + 40 tokens, so sequences are preempted between drafting and
// verifying (their kept rows then belong to nobody) and recompute; every
// request still runs to max_tokens, its verifications are device ones, and
// both pools drain; then eight requests cancelled mid-speculation drain too.
TEST(DeviceVerification, PreemptionAndCancelMidSpeculationFreeBothPools) {
  Fixture& f = fixture();
  ModelInstanceOptions small;
  small.kv_tokens = 12 * 16;
  small.token_picking = TokenPicking::kAlways;
  auto target = testing::load_golden_model("llama-gqa", f.backend, small);
  std::vector<int32_t> prompt = f.prompt;
  prompt.resize(std::min<size_t>(prompt.size(), 50));
  int32_t preemptions = 0;
  // As SpecDecodeEngine's preemption test: the engine thread may run the
  // first requests before the others arrive, so preemption must happen in
  // one of a few attempts.
  for (int attempt = 0; attempt < 5 && preemptions == 0; ++attempt) {
    SCOPED_TRACE(attempt);
    Engine engine(*target, testing::fixed_k_spec_options(f.devices.draft.get(), 8));
    std::vector<RequestOptions> requests;
    for (int r = 0; r < 4; ++r) requests.push_back(testing::seeded_sampled(prompt, 40 + r, 40));
    for (const testing::RequestOutput& out : testing::run_all(engine, requests)) {
      EXPECT_EQ(out.tokens[0].size(), 40u);
    }
    const EngineMetrics m = engine.metrics();
    preemptions += static_cast<int32_t>(m.preemptions_total);
    EXPECT_GT(m.specdecode_device_verify_total, 0);
    EXPECT_EQ(m.specdecode_device_verify_total, m.specdecode_verify_total);
    testing::expect_engine_drained(engine);
  }
  EXPECT_GT(preemptions, 0);

  Engine engine(*f.devices.target, testing::fixed_k_spec_options(f.devices.draft.get(), 8));
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int r = 0; r < 8; ++r) {
    auto stream = engine.submit(testing::seeded_sampled(f.prompt, 60 + r, 200));
    ASSERT_TRUE(stream.ok());
    streams.push_back(std::move(stream).value());
  }
  for (size_t r = 0; r < streams.size(); ++r) {
    int32_t seen = 0;
    while (!streams[r]->done()) {
      auto event = streams[r]->next(std::chrono::milliseconds(5000));
      if (!event) continue;
      seen += static_cast<int32_t>(event->tokens.size());
      if (seen >= 5 + int32_t(r)) streams[r]->cancel();
    }
    EXPECT_LT(seen, 200);
  }
  EXPECT_GT(engine.metrics().specdecode_device_verify_total, 0);
  testing::expect_engine_drained(engine);
}

}  // namespace
}  // namespace specstack

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

#include "../engine/device_verification_cases.h"
#include "../engine/engine_test_util.h"
#include "../engine/golden_reference.h"
#include "../engine/golden_run.h"
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

using testing::fixed_k_spec_options;

TEST(CudaDeviceVerification, SeededOutputEqualsTheHostPath) {
  SS_REQUIRE_GPU();
  Fixture& f = fixture();
  constexpr int kRequests = 48;
  std::vector<RequestOptions> requests;
  for (int r = 0; r < kRequests; ++r) {
    requests.push_back(testing::seeded_sampled(f.prompt, 100 + r, 16));
    if (r % 2 == 1) requests.back().params.min_p = 0.05f;
    if (r % 3 == 0) requests.back().top_logprobs = r % 4;  // computed on the device too
  }
  Engine host(*f.host_target, fixed_k_spec_options(f.host_draft.get(), kRequests));
  Engine device(*f.target, fixed_k_spec_options(f.draft.get(), kRequests));
  // Logprobs within bf16 rounding of logits ~5 (H200: up to 0.015 seen).
  testing::expect_seeded_streams_match(host, device, requests, 0.05);
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
  Engine device(*f.target, fixed_k_spec_options(f.draft.get(), kRequests));
  testing::expect_law_equals_plain(plain, device, kRequests, [&](uint64_t seed) {
    RequestOptions options = testing::seeded_sampled(f.prompt, seed, 3);
    testing::set_law_filters(options.params);
    return options;
  });
  EXPECT_GT(device.metrics().specdecode_device_verify_total, kRequests / 2);
  testing::expect_engine_drained(device);
}

}  // namespace
}  // namespace specstack

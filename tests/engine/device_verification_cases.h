// What the sampled-speculation-on-the-device tests share on the CPU
// (device_verification_test.cpp, TokenPicking::kAlways) and on the GPU
// (tests/cuda/device_verification_cuda_test.cpp): the requests, the engine
// options (fixed k 4), the seed-for-seed comparison against the host path
// (tokens, and logprobs where asked) and the three-token law against plain
// sampling.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "chi_square.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/row_sampling.h"
#include "sampling_law.h"

namespace specstack::testing {

inline RowSampling row_rule(float temperature, int32_t top_k, float top_p, float min_p) {
  RowSampling r;
  r.temperature = temperature;
  r.top_k = top_k;
  r.top_p = top_p;
  r.min_p = min_p;
  return r;
}

// Every step speculates k = 4.
inline EngineOptions fixed_k_spec_options(ModelInstance* draft, int max_queue) {
  EngineOptions options;
  options.specdecode.draft = draft;
  options.specdecode.max_draft_tokens = 4;
  options.specdecode.adaptive = false;
  options.max_queue = max_queue;
  return options;
}

// T = 1, seeded, to max_tokens.
inline RequestOptions seeded_sampled(const std::vector<int32_t>& prompt, uint64_t seed,
                                     int32_t max_tokens) {
  RequestOptions options;
  options.prompt = prompt;
  options.params.max_tokens = max_tokens;
  options.params.ignore_eos = true;
  options.params.seed = seed;
  options.params.temperature = 1.0f;
  return options;
}

// Runs `requests` on both engines; the device path's tokens equal the host
// path's for at least 90% of them (the same uniforms in the same order: only
// a draw within rounding of a boundary may differ; no top-k / top-p, where
// the host's Sampler walks candidates best first), and where they are equal
// and logprobs were asked, the logprobs too, within `logprob_tolerance`
// (f32 on the CPU: 1e-4; bf16 on a GPU, where the two engines' steps batch
// differently and the logits move by bf16 rounding: a few 1e-2). Returns
// the count equal.
inline int expect_seeded_streams_match(Engine& host, Engine& device,
                                       const std::vector<RequestOptions>& requests,
                                       double logprob_tolerance) {
  const std::vector<RequestOutput> want = run_all(host, requests);
  const std::vector<RequestOutput> got = run_all(device, requests);
  int same = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto length = static_cast<size_t>(requests[i].params.max_tokens);
    EXPECT_EQ(got[i].tokens[0].size(), length);
    same += got[i].tokens[0] == want[i].tokens[0];
    if (requests[i].top_logprobs < 0 || got[i].tokens[0] != want[i].tokens[0]) continue;
    EXPECT_EQ(got[i].logprobs[0].size(), length);
    EXPECT_EQ(want[i].logprobs[0].size(), length);
    for (size_t t = 0; t < got[i].logprobs[0].size() && t < want[i].logprobs[0].size(); ++t) {
      const TokenLogprob& g = got[i].logprobs[0][t];
      const TokenLogprob& w = want[i].logprobs[0][t];
      EXPECT_EQ(g.token, got[i].tokens[0][t]);
      EXPECT_NEAR(g.logprob, w.logprob, logprob_tolerance);
      EXPECT_EQ(g.top.size(), size_t(requests[i].top_logprobs));
      EXPECT_EQ(g.top.size(), w.top.size());
      for (size_t a = 0; a < g.top.size() && a < w.top.size(); ++a) {
        // Rank a's logprob agrees; its token too, unless two alternatives
        // are within the tolerance of each other (a near tie may swap).
        EXPECT_NEAR(g.top[a].second, w.top[a].second, logprob_tolerance);
        if (g.top[a].first != w.top[a].first) {
          const bool near_tie =
              (a > 0 && std::abs(w.top[a].second - w.top[a - 1].second) <= logprob_tolerance) ||
              (a + 1 < w.top.size() &&
               std::abs(w.top[a].second - w.top[a + 1].second) <= logprob_tolerance);
          EXPECT_TRUE(near_tie) << "rank " << a << ": " << g.top[a].first << " vs "
                                << w.top[a].first;
        }
      }
    }
  }
  std::printf("  %d of %zu seeded streams identical\n", same, requests.size());
  EXPECT_GE(same, static_cast<int>(requests.size()) * 9 / 10);
  return same;
}

// The law of the first three tokens (the second and third come from
// verifications: accepted drafts, residual draws, bonus tokens) with every
// filter (set_law_filters), make(seed) giving 3-token requests: the
// speculating engine against plain sampling on `plain` (chi-square
// homogeneity, 44 cells: the first token among plain's ten most likely, the
// second's and third's parity).
inline void expect_law_equals_plain(Engine& plain, Engine& speculating, int n_requests,
                                    const std::function<RequestOptions(uint64_t)>& make) {
  RequestOptions probe = make(1);
  const std::vector<int32_t> top = most_likely_first_tokens(plain, probe, 10);
  ASSERT_EQ(top.size(), 10u);
  const auto cell_of = [&](const std::vector<int32_t>& tokens) {
    return first_two_cell(top, tokens) * 2 + static_cast<size_t>(tokens.at(2) % 2);
  };
  const std::vector<int64_t> expected = sample_cells(plain, make, n_requests, 1, cell_of, 44);
  const std::vector<int64_t> observed =
      sample_cells(speculating, make, n_requests, 1'000'000, cell_of, 44);
  const ChiSquareFit fit = chi_square_homogeneity(expected, observed);
  std::printf("  chi2 %.2f df %d p %.4f\n", fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 8);
  EXPECT_GT(fit.p_value, 0.001);
}

}  // namespace specstack::testing

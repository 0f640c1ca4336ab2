// verify_rows (model/row_verification.h): the host twin of the GPU's
// speculative verification. It consumes exactly the uniforms it says it
// does (the engine skips that many in the request's generator), and its
// output has the target's law whatever the draft: the first emitted token
// follows p_0 and the second p_1 (rows fixed here, so the second's law does
// not depend on the first), for every filter. Drafts that were not drawn
// from the q rows the verifier is given fail the same harness.
#include "model/row_verification.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "chi_square.h"
#include "device_verification_cases.h"

namespace specstack {
namespace {

constexpr int64_t kVocab = 10;
constexpr int64_t kDraftVocab = 9;  // narrower than the target's: token 9 has q = 0
constexpr int32_t kDraftTokens = 3;

// Target rows p_0 .. p_3 [4, kVocab] and draft rows q_0 .. q_2 [3, kDraftVocab]
// that disagree a lot, so rejections and residual draws are common.
const std::vector<float> kTarget = {
    2.0f,  1.5f, 1.0f,  0.5f, 0.0f,  -0.5f, -1.0f, -1.5f, -2.0f, 1.2f,   // p_0
    -1.0f, 0.0f, 2.0f,  0.4f, 1.0f,  0.5f,  -0.5f, 1.5f,  -3.0f, 0.0f,   // p_1
    0.3f,  0.2f, 0.1f,  0.0f, -0.1f, -0.2f, -0.3f, -0.4f, -0.5f, -0.6f,  // p_2
    1.0f,  1.0f, -1.0f, 0.0f, 2.0f,  0.0f,  -2.0f, 0.5f,  0.5f,  0.0f};  // p_3
const std::vector<float> kDraft = {
    -1.0f, 0.0f,  2.5f, -2.0f, 1.0f, 0.5f, -0.5f, 1.5f, -3.0f,   // q_0
    2.0f,  1.5f,  1.0f, 0.5f,  0.0f, 1.0f, -1.0f, 0.0f, 0.0f,    // q_1
    0.0f,  -1.0f, 1.0f, 0.0f,  2.0f, 0.0f, 1.0f,  0.0f, -1.0f};  // q_2

using testing::row_rule;

std::vector<float> distribution(const float* logits, int64_t vocab, const RowSampling& r) {
  std::vector<float> probs;
  row_distribution(logits, vocab, r, nullptr, 0, probs);
  return probs;
}

// Counts of the first and (where the verification emitted one) the second
// token over n verifications; draws the draft tokens from q, or with
// draft_from_q false uniformly (the negative control).
struct Counts {
  std::vector<int64_t> first = std::vector<int64_t>(kVocab, 0);
  std::vector<int64_t> second = std::vector<int64_t>(kVocab, 0);
};
Counts verify_many(const RowSampling& r, int n, uint64_t seed, bool draft_from_q = true) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 0.99999994f);
  Counts counts;
  RowVerification v;
  v.sampling = r;
  for (int t = 0; t < n; ++t) {
    v.draft_tokens.clear();
    v.uniforms.clear();
    for (int32_t i = 0; i < kDraftTokens; ++i) {
      RowSampling draw = r;
      draw.uniform = unit(rng);
      v.draft_tokens.push_back(
          draft_from_q ? sample_row(kDraft.data() + i * kDraftVocab, kDraftVocab, draw, nullptr, 0)
                       : static_cast<int32_t>(rng() % kDraftVocab));
    }
    for (int32_t i = 0; i <= kDraftTokens; ++i) v.uniforms.push_back(unit(rng));
    const VerifyOutcome o = verify_rows(kTarget.data(), kVocab, kDraft.data(), kDraftVocab, v);
    std::vector<int32_t> emitted(v.draft_tokens.begin(), v.draft_tokens.begin() + o.n_accepted);
    emitted.push_back(o.next_token);
    ++counts.first[size_t(emitted[0])];
    if (emitted.size() > 1) ++counts.second[size_t(emitted[1])];
  }
  return counts;
}

ChiSquareFit fit_to(const std::vector<int64_t>& counts, const std::vector<float>& probs) {
  return chi_square_fit(counts, std::vector<double>(probs.begin(), probs.end()));
}

TEST(RowVerification, ConsumesTheUniformsItSays) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> unit(0.0f, 0.99999994f);
  const RowSampling r = row_rule(1.0f, 0, 1.0f, 0.0f);
  int seen_rejection = 0, seen_all = 0;
  for (int t = 0; t < 2000; ++t) {
    RowVerification v;
    v.sampling = r;
    for (int32_t i = 0; i < kDraftTokens; ++i)
      v.draft_tokens.push_back(int32_t(rng() % kDraftVocab));
    std::vector<std::span<const float>> q_spans;
    std::vector<std::vector<float>> q;
    for (int32_t i = 0; i < kDraftTokens; ++i)
      q.push_back(distribution(kDraft.data() + i * kDraftVocab, kDraftVocab, r));
    for (const auto& row : q) q_spans.emplace_back(row);
    std::vector<float> p;
    int32_t n_used = 0;
    const VerifyOutcome counted = verify_stochastic(
        v.draft_tokens, q_spans,
        [&](int32_t i) -> std::span<const float> {
          p = distribution(kTarget.data() + i * kVocab, kVocab, r);
          return p;
        },
        [&] {
          v.uniforms.push_back(unit(rng));
          ++n_used;
          return static_cast<double>(v.uniforms.back());
        });
    EXPECT_EQ(n_used, uniforms_used(counted, kDraftTokens));
    v.uniforms.resize(kDraftTokens + 1, 0.5f);  // unused ones: any value
    const VerifyOutcome twin = verify_rows(kTarget.data(), kVocab, kDraft.data(), kDraftVocab, v);
    EXPECT_EQ(twin.n_accepted, counted.n_accepted);
    EXPECT_EQ(twin.next_token, counted.next_token);
    (counted.n_accepted == kDraftTokens ? seen_all : seen_rejection)++;
  }
  EXPECT_GT(seen_rejection, 100);
  EXPECT_GT(seen_all, 10);
}

TEST(RowVerification, OutputHasTheTargetsLawForEveryFilter) {
  constexpr int kTrials = 60000;
  for (const RowSampling& r :
       {row_rule(1.0f, 0, 1.0f, 0.0f), row_rule(0.7f, 5, 1.0f, 0.0f), row_rule(1.3f, 0, 0.8f, 0.0f),
        row_rule(1.0f, 0, 1.0f, 0.2f), row_rule(1.0f, 6, 0.9f, 0.05f)}) {
    SCOPED_TRACE(::testing::Message() << "T " << r.temperature << " top_k " << r.top_k << " top_p "
                                      << r.top_p << " min_p " << r.min_p);
    const Counts counts = verify_many(r, kTrials, 11);
    const ChiSquareFit first = fit_to(counts.first, distribution(kTarget.data(), kVocab, r));
    const ChiSquareFit second =
        fit_to(counts.second, distribution(kTarget.data() + kVocab, kVocab, r));
    std::printf("  first chi2 %.2f df %d p %.4f; second chi2 %.2f df %d p %.4f\n", first.statistic,
                first.df, first.p_value, second.statistic, second.df, second.p_value);
    EXPECT_EQ(first.zero_probability_hits, 0);
    EXPECT_EQ(second.zero_probability_hits, 0);
    EXPECT_GT(first.p_value, 0.001);
    EXPECT_GT(second.p_value, 0.001);
  }
}

TEST(RowVerification, DraftsNotDrawnFromTheirRowsFailTheLaw) {
  const RowSampling r = row_rule(1.0f, 0, 1.0f, 0.0f);
  const Counts counts = verify_many(r, 60000, 11, /*draft_from_q=*/false);
  const ChiSquareFit first = fit_to(counts.first, distribution(kTarget.data(), kVocab, r));
  std::printf("  negative control: chi2 %.2f df %d p %.3g\n", first.statistic, first.df,
              first.p_value);
  EXPECT_LT(first.p_value, 1e-6);
}

}  // namespace
}  // namespace specstack

// verify_draft_rows / keep_logit_rows (cuda/verification.h) against
// verify_rows (model/row_verification.h), their CPU twin: random chunks of
// k = 1..4 draft tokens drawn from their draft rows, at a small vocabulary
// and at Qwen2.5's (a 0.5B draft's 151,936 columns under a 7B target's
// 152,064), for every filter (temperature alone, top-k, top-p, min-p,
// together), with drafts close to the target (long accepted runs, bonus
// draws) and far from it (residual draws). The device sums in fp32 where the
// twin sums in double, so an outcome may differ only where a uniform falls
// within rounding of a boundary: at most 1% of chunks here, and every device
// outcome has positive probability under the twin's distributions.
#include "cuda/verification.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../engine/device_verification_cases.h"
#include "cuda/cuda_test_util.h"
#include "model/row_verification.h"

namespace specstack::cuda {
namespace {

namespace ct = ::specstack::cuda::testing;

using ::specstack::testing::row_rule;

const RowSampling kRules[] = {row_rule(1.0f, 0, 1.0f, 0.0f), row_rule(0.7f, 40, 1.0f, 0.0f),
                              row_rule(1.0f, 0, 0.9f, 0.0f), row_rule(1.2f, 0, 1.0f, 0.05f),
                              row_rule(0.8f, 50, 0.95f, 0.02f)};

// Whether `token` has positive probability where the verification drew it:
// the residual of row n_accepted, or p_k after all k were accepted.
bool possible(const float* target, int64_t vocab, const float* draft, int64_t draft_vocab,
              const RowVerification& v, const VerifyOutcome& o) {
  const auto k = static_cast<int32_t>(v.draft_tokens.size());
  std::vector<float> p, q;
  row_distribution(target + int64_t{o.n_accepted} * vocab, vocab, v.sampling, nullptr, 0, p);
  if (o.next_token < 0 || o.next_token >= vocab || !(p[size_t(o.next_token)] > 0.0f)) return false;
  if (o.n_accepted == k) return true;
  row_distribution(draft + int64_t{o.n_accepted} * draft_vocab, draft_vocab, v.sampling, nullptr, 0,
                   q);
  const float q_next = o.next_token < draft_vocab ? q[size_t(o.next_token)] : 0.0f;
  // The residual's support, with a rounding margin (p == q rows fall back to p).
  return p[size_t(o.next_token)] > q_next * (1.0f - 1e-4f) || p == q;
}

void expect_matches_twin(int64_t vocab, int64_t draft_vocab, int n_chunks, float draft_noise,
                         uint64_t seed) {
  SCOPED_TRACE(::testing::Message()
               << "vocab " << vocab << " draft " << draft_vocab << " noise " << draft_noise);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 0.99999994f);
  std::vector<RowVerification> chunks;
  std::vector<float> target, draft;  // [rows, vocab], [kept rows, draft_vocab]
  int32_t max_k = 0;
  for (int c = 0; c < n_chunks; ++c) {
    RowVerification v;
    const int32_t k = 1 + c % 4;
    max_k = std::max(max_k, k);
    v.sampling = kRules[size_t(c) % std::size(kRules)];
    v.first_row = static_cast<int32_t>(target.size() / size_t(vocab));
    v.first_kept_row = static_cast<int32_t>(draft.size() / size_t(draft_vocab));
    for (int32_t i = 0; i <= k; ++i) {
      const size_t at = target.size();
      for (int64_t t = 0; t < vocab; ++t) target.push_back(3.0f * normal(rng));
      if (i == k) break;
      for (int64_t t = 0; t < draft_vocab; ++t)
        draft.push_back(target[at + size_t(t)] + draft_noise * normal(rng));
      RowSampling draw = v.sampling;
      draw.uniform = unit(rng);
      v.draft_tokens.push_back(sample_row(draft.data() + draft.size() - size_t(draft_vocab),
                                          draft_vocab, draw, nullptr, 0));
    }
    for (int32_t i = 0; i <= k; ++i) v.uniforms.push_back(unit(rng));
    chunks.push_back(std::move(v));
  }
  // Inputs as CudaModel lays them out.
  std::vector<int32_t> info, top_k, tokens;
  std::vector<float> params, uniforms;
  for (const RowVerification& v : chunks) {
    const auto k = static_cast<int32_t>(v.draft_tokens.size());
    info.insert(info.end(), {v.first_row, v.first_kept_row, k});
    params.insert(params.end(), {v.sampling.temperature, v.sampling.top_p, v.sampling.min_p});
    top_k.push_back(v.sampling.top_k);
    for (int32_t i = 0; i < max_k; ++i) tokens.push_back(i < k ? v.draft_tokens[size_t(i)] : 0);
    for (int32_t i = 0; i <= max_k; ++i) uniforms.push_back(i <= k ? v.uniforms[size_t(i)] : 0.f);
  }
  auto d_target = ct::upload(target);
  auto d_draft = ct::upload(draft);
  auto d_info = ct::upload(info);
  auto d_top_k = ct::upload(top_k);
  auto d_tokens = ct::upload(tokens);
  auto d_params = ct::upload(params);
  auto d_uniforms = ct::upload(uniforms);
  DeviceBuffer<uint8_t> scratch(verify_scratch_bytes(n_chunks, max_k));
  DeviceBuffer<int32_t> d_out(2 * size_t(n_chunks));
  d_out.fill_bytes(0xFF);
  DraftVerification in;
  in.target = d_target.data();
  in.target_ld = vocab;
  in.vocab = static_cast<int32_t>(vocab);
  in.draft = d_draft.data();
  in.draft_ld = draft_vocab;
  in.draft_vocab = static_cast<int32_t>(draft_vocab);
  in.n_chunks = n_chunks;
  in.max_k = max_k;
  in.chunks = d_info.data();
  in.tokens = d_tokens.data();
  in.uniforms = d_uniforms.data();
  in.params = d_params.data();
  in.top_k = d_top_k.data();
  verify_draft_rows(in, scratch.data(), d_out.data(), nullptr);
  const std::vector<int32_t> out = d_out.download();

  int n_differ = 0, n_all_accepted = 0, n_rejected = 0;
  for (int c = 0; c < n_chunks; ++c) {
    const RowVerification& v = chunks[size_t(c)];
    const float* t = target.data() + int64_t{v.first_row} * vocab;
    const float* d = draft.data() + int64_t{v.first_kept_row} * draft_vocab;
    const VerifyOutcome want = verify_rows(t, vocab, d, draft_vocab, v);
    const VerifyOutcome got{out[2 * size_t(c)], out[2 * size_t(c) + 1]};
    ASSERT_GE(got.n_accepted, 0);
    ASSERT_LE(got.n_accepted, static_cast<int32_t>(v.draft_tokens.size()));
    EXPECT_TRUE(possible(t, vocab, d, draft_vocab, v, got)) << "chunk " << c;
    n_differ += got.n_accepted != want.n_accepted || got.next_token != want.next_token;
    (want.n_accepted == static_cast<int32_t>(v.draft_tokens.size()) ? n_all_accepted
                                                                    : n_rejected)++;
  }
  std::printf("  %d of %d chunks differ from the twin (%d all accepted, %d rejected)\n", n_differ,
              n_chunks, n_all_accepted, n_rejected);
  EXPECT_LE(n_differ, n_chunks / 100);
  EXPECT_GT(n_rejected, 0);
}

TEST(CudaVerification, SmallVocabularyCloseAndFarDrafts) {
  SS_REQUIRE_GPU();
  expect_matches_twin(1000, 1000, 600, 0.3f, 1);
  expect_matches_twin(1000, 997, 600, 3.0f, 2);
}

TEST(CudaVerification, QwenVocabularyWithANarrowerDraft) {
  SS_REQUIRE_GPU();
  expect_matches_twin(152064, 151936, 60, 0.3f, 3);
  expect_matches_twin(152064, 151936, 60, 2.0f, 4);
}

TEST(CudaVerification, KeepLogitRowsCopiesTheNamedRows) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(5);
  const int32_t vocab = 1001, n_rows = 5;
  const std::vector<float> logits = ct::random_values(rng, size_t(n_rows) * vocab);
  const std::vector<int32_t> keep = {3, -1, 0, -1, 1};
  auto d_logits = ct::upload(logits);
  auto d_keep = ct::upload(keep);
  DeviceBuffer<float> kept(4 * size_t(vocab));
  kept.fill_bytes(0x7F);
  keep_logit_rows(d_logits.data(), n_rows, vocab, d_keep.data(), kept.data(), nullptr);
  const std::vector<float> got = kept.download();
  for (int32_t r = 0; r < n_rows; ++r) {
    if (keep[size_t(r)] < 0) continue;
    for (int32_t t = 0; t < vocab; ++t) {
      ASSERT_EQ(got[size_t(keep[size_t(r)]) * vocab + size_t(t)],
                logits[size_t(r) * vocab + size_t(t)]);
    }
  }
  // Row 2 of kept was named by no row: untouched.
  EXPECT_EQ(got[2 * size_t(vocab)], got[2 * size_t(vocab) + 1]);
}

}  // namespace
}  // namespace specstack::cuda

#include "model/row_verification.h"

#include <span>

#include "base/check.h"

namespace specstack {

VerifyOutcome verify_rows(const float* target_rows, int64_t vocab, const float* draft_rows,
                          int64_t draft_vocab, const RowVerification& verification) {
  const auto k = static_cast<int32_t>(verification.draft_tokens.size());
  SS_CHECK_EQ(verification.uniforms.size(), static_cast<size_t>(k + 1));
  SS_CHECK_LE(draft_vocab, vocab);
  std::vector<std::vector<float>> q(static_cast<size_t>(k));
  std::vector<std::span<const float>> q_spans;
  for (int32_t i = 0; i < k; ++i) {
    row_distribution(draft_rows + int64_t{i} * draft_vocab, draft_vocab, verification.sampling,
                     nullptr, 0, q[size_t(i)]);
    q_spans.emplace_back(q[size_t(i)]);
  }
  std::vector<float> p;
  const auto target_row = [&](int32_t i) -> std::span<const float> {
    row_distribution(target_rows + int64_t{i} * vocab, vocab, verification.sampling, nullptr, 0, p);
    return p;
  };
  size_t next_uniform = 0;
  const auto uniform = [&]() -> double {
    SS_CHECK_LT(next_uniform, verification.uniforms.size());
    return verification.uniforms[next_uniform++];
  };
  return verify_stochastic(verification.draft_tokens, q_spans, target_row, uniform);
}

}  // namespace specstack

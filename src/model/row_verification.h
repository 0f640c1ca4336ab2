// RowVerification: speculative verification done where a model picks its
// tokens (StepPlan::verifications): one speculating sequence's k + 1 target
// logit rows checked against the k logit rows the draft model kept when it
// drew the draft tokens (StepPlan::keep_rows on the draft's plan), by the
// modified rejection sampling of specdecode/rejection_sampler.h on the
// processed distributions of model/row_sampling.h's rule (the same
// temperature, top-k, top-p and min-p on both sides). On a GPU nothing
// vocab-sized crosses to the host: only (n_accepted, next token) comes back.
//
// verify_rows is the rule on the host: the CPU twin of the GPU's
// verification kernel (cuda/verification.h), used where a model returns
// logits instead of picking (host models under TokenPicking::kAlways).
#pragma once

#include <cstdint>
#include <vector>

#include "model/row_sampling.h"
#include "specdecode/rejection_sampler.h"

namespace specstack {

// A draft model's kept logit rows (ModelRunner::kept_rows), valid until its
// next step.
struct KeptRows {
  const float* data = nullptr;  // [n_rows, vocab] f32; device memory when on_device
  int64_t n_rows = 0;
  int64_t vocab = 0;
  bool on_device = false;
};

struct RowVerification {
  // Index into the plan's logit_rows of target row 0: rows first_row ..
  // first_row + k are p_0 .. p_k (p_i: after draft tokens 0 .. i - 1).
  int32_t first_row = 0;
  // Index into the draft's kept rows of q_0: rows first_kept_row ..
  // first_kept_row + k - 1 are the rows draft tokens 0 .. k - 1 were drawn from.
  int32_t first_kept_row = 0;
  RowSampling sampling;               // the rule on both sides (its uniform is unused)
  std::vector<int32_t> draft_tokens;  // [k]
  // [k + 1]: the request's next uniforms, consumed in verify_stochastic's
  // order (one per examined draft token, then one for the next token);
  // uniforms_used says how many a given outcome took.
  std::vector<float> uniforms;
};

// The uniforms an outcome consumed: k + 1 when all k were accepted, else
// n_accepted + 2 (the examined tokens and the residual draw).
inline int32_t uniforms_used(const VerifyOutcome& outcome, int32_t k) {
  return outcome.n_accepted == k ? k + 1 : outcome.n_accepted + 2;
}

// target_rows [k + 1, vocab] raw logits, draft_rows [k, draft_vocab] raw
// logits (draft_vocab <= vocab: tokens past it have q = 0).
VerifyOutcome verify_rows(const float* target_rows, int64_t vocab, const float* draft_rows,
                          int64_t draft_vocab, const RowVerification& verification);

}  // namespace specstack

// StepPlan: one forward step as a flat batch. Every token says explicitly
// which sequence it belongs to, its RoPE position and the KV slot it fills;
// every sequence brings its block table. Prefill chunks, decode tokens and
// sparse (speculative) prefills are all just rows of this plan.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/logit_masks.h"
#include "model/row_logprobs.h"
#include "model/row_sampling.h"
#include "model/row_verification.h"

namespace specstack {

struct StepPlan {
  // Per token [n_tokens]. Tokens of one sequence need not be contiguous, but
  // their slots must be fresh (not yet written) and below seq_n_slots.
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;   // RoPE position (original position for sparse prefill)
  std::vector<int32_t> seq_index;   // index into the per-sequence vectors
  std::vector<int32_t> slots;       // logical KV slot within the sequence; masks causally
  std::vector<int32_t> logit_rows;  // ascending token indices whose logits are returned
  // Ascending token indices whose post-RoPE (post q_norm) queries are returned
  // for every layer: the speculative-prefill draft asks for them.
  std::vector<int32_t> capture_rows;
  // The model picks each logit row's token itself (on the GPU: no logits
  // cross PCIe) and returns ids (StepOutput::picked_tokens); only the rows
  // in host_rows also bring their logits back.
  bool tokens_on_device = false;
  // With tokens_on_device, per logit row [logit_rows.size()]: how its token
  // is picked (model/row_sampling.h). Empty: every row takes its argmax.
  std::vector<RowSampling> sampling;
  // With tokens_on_device, per logit row [logit_rows.size()] (empty: none):
  // how many alternatives' logprobs come back with the picked token's
  // (StepOutput::logprobs, model/row_logprobs.h); -1: none for this row.
  std::vector<int32_t> top_logprobs;
  // With tokens_on_device: ascending indices into logit_rows whose logits
  // come back too (StepOutput::logits [host_rows.size(), vocab]), for rows
  // the host samples itself (penalties, n > 1 forks, sampled speculative
  // verification); their picked tokens are not used.
  std::vector<int32_t> host_rows;
  // With tokens_on_device: the grammar masks of constrained logit rows
  // (engine/grammar_stage.h), applied where the model picks the token (on
  // the GPU in the sampling kernel). Empty: no row is constrained. Host rows
  // carry none: the host masks their logits itself.
  LogitMasks masks;
  // When set, fills `masks` late: ModelRunner runs it exactly once, after
  // the model has queued the forward on its device and before the tokens
  // are picked, so the host's mask work overlaps the device's forward.
  std::function<void()> fill_masks;
  // With tokens_on_device, per logit row [logit_rows.size()] (empty: none):
  // the row of the model's kept rows (ModelRunner::kept_rows) its logits are
  // copied to, or -1. A speculative draft keeps the rows it drew sampled
  // draft tokens from, so the target verifies against them where both live.
  std::vector<int32_t> keep_rows;
  // With tokens_on_device: sampled speculative verifications done where the
  // tokens are picked (model/row_verification.h), against draft_rows (the
  // draft model's kept rows, on the same device as this model). Their logit
  // rows' picked tokens (and logprobs, with top_logprobs) are the tokens it
  // emitted, row i the i-th (rows past the last emitted: unused); outcomes
  // come back in StepOutput::verified, in this order.
  std::vector<RowVerification> verifications;
  KeptRows draft_rows;
  // Multi-step greedy decoding: after this step, this many more single-token
  // steps run for the sequences of the logit rows, each feeding the token its
  // row took in the step before at the next position and slot, with no host
  // round trip between them where the model can (ForwardModel::forward_follow;
  // the SpecPrefill draft's lookahead). Needs tokens_on_device and argmax
  // picking alone (no sampling, masks, logprobs, host / kept rows or
  // verifications); each logit row is the last slot of its sequence
  // (seq_n_slots - 1), one a sequence, and its block table already covers
  // follow_steps more slots; capture_rows is empty or equals logit_rows.
  // StepOutput then holds every step's picks and captured queries.
  int32_t follow_steps = 0;

  // Per sequence [n_seqs].
  std::vector<std::vector<int32_t>> block_tables;  // logical -> physical block
  std::vector<int32_t> seq_n_slots;                // filled slots once this step is written

  int64_t n_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t n_seqs() const { return static_cast<int64_t>(block_tables.size()); }

  // Adds one token; returns its row index.
  int32_t add_token(int32_t token_id, int32_t position, int32_t seq, int32_t slot,
                    bool want_logits);
};

}  // namespace specstack

// Chunk selection for speculative prefill (ALGORITHM.md step 4): which prompt
// tokens the target prefills, given the draft's token importance.
//
// [0, M) is cut into chunks of `chunk` tokens (the last may be short); a
// chunk's score is the mean importance of its tokens. The top
// ceil(keep_pct * n_chunks) chunks are kept, ties going to the lower chunk
// index. Forced chunks are then added on top:
//   * force_first_last: chunk 0 (attention sink / BOS) and the chunk holding
//     the last token (its logits predict the first output token, so the
//     engine always needs it);
//   * force_recent_window = W > 0: every chunk that covers one of the last W
//     positions, so sliding-window layers of width W see valid recent context.
//
// Budget: forced chunks do NOT count toward ceil(keep_pct * n_chunks); the
// result is the union of the top-k and the forced chunks. A forced chunk
// exists for correctness, not for importance, and counting it would starve the
// importance picks at small budgets (3 chunks with 2 forced leaves 1 pick).
// The golden `score.kept_chunks_union_first_last` = [0, 2, 7, 10] is this union
// of the pure top-3 `score.kept_chunks` = [0, 2, 7] and {0, 10}. So at most
// 2 + ceil(W / chunk) + 1 chunks beyond the budget are kept.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace specstack {

struct SelectionOptions {
  double keep_pct = 0.2;  // (0, 1]; 1 keeps every chunk
  int64_t chunk = 32;     // tokens per chunk, >= 1
  bool force_first_last = true;
  int64_t force_recent_window = 0;  // W of the draft/target's sliding-window layers; 0 = none
  // Added to each kept token index: the length P of a cached prefix when only
  // the suffix [P, M) was scored, so kept_positions are RoPE positions.
  int64_t position_offset = 0;
};

struct SelectionResult {
  std::vector<int32_t> kept_chunks;     // ascending chunk indices
  std::vector<int32_t> kept_positions;  // ascending token indices + position_offset
  std::vector<float> chunk_scores;      // [n_chunks] mean importance per chunk
  int32_t n_budget_chunks = 0;          // ceil(keep_pct * n_chunks), before forced chunks
};

// The number of top-scoring chunks kept out of n_chunks: ceil(keep_pct *
// n_chunks), at least 1. The product is rounded to 1e-9 first so that, e.g.,
// 0.3 * 10 (3.0000000000000004 in binary) keeps 3 chunks, not 4.
int32_t budget_chunks(double keep_pct, int64_t n_chunks);

// Errors on an empty importance, keep_pct outside (0, 1], chunk < 1, a
// negative window or offset, positions that overflow int32, or a non-finite
// chunk score.
Result<SelectionResult> select_chunks(std::span<const float> importance,
                                      const SelectionOptions& options);

}  // namespace specstack

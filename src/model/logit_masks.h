// LogitMasks: the tokens each logit row of a step may take, as bitmasks
// (grammar-constrained decoding, engine/grammar_stage.h). A model that picks
// the tokens itself (ForwardBatch::picked_tokens) honours them: on the GPU
// the bits go up and the sampling kernel reads a masked token as -inf
// (cuda/sampling.h), so a constrained row never brings its 150K logits down
// to the host; a host model's argmax skips masked tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace specstack {

struct LogitMasks {
  int32_t words_per_row = 0;  // ceil(vocab / 32)
  // [n_masks, words_per_row]: bit t % 32 of word t / 32 set = token t admitted.
  std::vector<uint32_t> bits;
  // [n logit rows]: the row's mask index into `bits`, or -1 = every token
  // admitted. Empty (or every entry -1): nothing is masked.
  std::vector<int32_t> row_mask;

  int32_t n_masks() const {
    return words_per_row == 0 ? 0 : static_cast<int32_t>(bits.size() / size_t(words_per_row));
  }
  bool empty() const { return n_masks() == 0; }
  // n_rows unmasked rows over a vocabulary of `vocab`; keeps the capacity.
  void reset(size_t n_rows, int64_t vocab);
  // A mask for logit row `row` (unmasked so far); returns its words, to be
  // filled completely by the caller.
  std::span<uint32_t> add(size_t row);
  // Takes back the mask add() just gave `row` (the row is not constrained).
  void drop_last(size_t row);
  // The row admits the token (true for rows without a mask).
  bool admits(size_t row, int32_t token) const;
};

// The lowest id among the row's highest admitted logits (NaN never wins); 0
// when no admitted logit is above -inf. masks null or the row unmasked: the
// plain argmax (std::max_element).
int32_t masked_argmax(const float* logits, int64_t vocab, const LogitMasks* masks, size_t row);

}  // namespace specstack

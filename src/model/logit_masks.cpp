#include "model/logit_masks.h"

#include <algorithm>
#include <limits>

#include "base/check.h"

namespace specstack {

void LogitMasks::reset(size_t n_rows, int64_t vocab) {
  words_per_row = static_cast<int32_t>((vocab + 31) / 32);
  bits.clear();
  row_mask.assign(n_rows, -1);
}

std::span<uint32_t> LogitMasks::add(size_t row) {
  SS_CHECK_LT(row, row_mask.size());
  SS_CHECK_EQ(row_mask[row], -1);
  const size_t begin = bits.size();
  row_mask[row] = n_masks();
  bits.resize(begin + size_t(words_per_row));
  return std::span<uint32_t>(bits.data() + begin, size_t(words_per_row));
}

void LogitMasks::drop_last(size_t row) {
  SS_CHECK_LT(row, row_mask.size());
  SS_CHECK_EQ(row_mask[row], n_masks() - 1);
  row_mask[row] = -1;
  bits.resize(bits.size() - size_t(words_per_row));
}

bool LogitMasks::admits(size_t row, int32_t token) const {
  if (row >= row_mask.size() || row_mask[row] < 0) return true;
  if (token < 0 || token / 32 >= words_per_row) return false;
  const uint32_t word = bits[size_t(row_mask[row]) * size_t(words_per_row) + size_t(token / 32)];
  return ((word >> (token % 32)) & 1u) != 0;
}

int32_t masked_argmax(const float* logits, int64_t vocab, const LogitMasks* masks, size_t row) {
  if (masks == nullptr || row >= masks->row_mask.size() || masks->row_mask[row] < 0) {
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  }
  // As the host sampler and the device kernel: token 0 when no admitted
  // logit is above -inf (the engine's grammar then refuses it and ends the choice).
  int32_t best = 0;
  float best_value = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) {
    const auto token = static_cast<int32_t>(i);
    if (!masks->admits(row, token)) continue;
    if (logits[i] > best_value) {  // strict: ties go to the lowest id; NaN never wins
      best = token;
      best_value = logits[i];
    }
  }
  return best;
}

}  // namespace specstack

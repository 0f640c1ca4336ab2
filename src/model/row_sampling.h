// RowSampling: how a model that picks tokens itself (ForwardBatch::
// picked_tokens) chooses one logit row's token: the argmax, or a draw from
// the row's tempered, top-k / top-p / min-p-filtered distribution with a
// uniform the engine drew from the sequence's own seeded generator, so a
// seeded request gets the same tokens whatever else shares its batch.
//
// sample_row is the rule on the host: the CPU twin of the GPU's sampling
// kernel (cuda/sampling.h), used where a model returns logits instead of
// picking (host models, tensor-parallel ranks). Its draw walks the kept
// tokens in id order, so it picks the same token as the kernel up to fp32
// rounding of the masses compared, and draws from the same distribution as
// Sampler::sample (which walks top-k / top-p candidates best first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/logit_masks.h"

namespace specstack {

struct RowSampling {
  float temperature = 0.0f;  // <= 0: the argmax (lowest id among equal maxima)
  int32_t top_k = 0;         // 0: every token
  float top_p = 1.0f;        // 1: no nucleus cut
  float min_p = 0.0f;        // 0: no cut; applied after top-k and top-p, as vLLM does
  float uniform = 0.0f;      // [0, 1): the draw's position in the kept mass
};

// The token `sampling` picks from logits [vocab] f32 (row `row` of `masks`;
// null or unmasked: every token). The rule, with l_i the logit (NaN as -inf,
// -inf where the mask clears the token) and m = max l_i:
//  * temperature <= 0 or m = -inf: the lowest i with l_i = m;
//  * w_i = l_i == m ? 1 : exp((l_i - m) / T); top-k keeps {l >= the k-th
//    largest l}; top-p then keeps {l >= v} for the largest v whose kept mass
//    reaches top_p of the top-k mass; min-p zeroes kept weights below min_p
//    (the max has weight 1 and stays); the pick is the first id whose
//    cumulative kept weight exceeds uniform * (kept mass).
int32_t sample_row(const float* logits, int64_t vocab, const RowSampling& sampling,
                   const LogitMasks* masks, size_t row);

// The distribution sample_row draws from: probs [vocab] = the kept weights
// over their sum (temperature <= 0 or an all -inf row: the argmax's one-hot).
void row_distribution(const float* logits, int64_t vocab, const RowSampling& sampling,
                      const LogitMasks* masks, size_t row, std::vector<float>& probs);

}  // namespace specstack

// The logprobs of picked tokens on the device (model/row_logprobs.h), so a
// request asking for logprobs needs no logits row on the host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace specstack::cuda {

// Per row r of logits [n_rows, vocab] f32 (row stride ld) with top_n[r] >= 0
// (rows with -1 are skipped), the rule of row_logprobs (its CPU twin): NaN
// counts as -inf and is left out of the normaliser Z = sum exp(l - max),
// summed in double; log_total = float(log Z) + max; logprob(i) = l_i -
// log_total. Writes logprob[r, 0] = logprob(token[r]) and, for j < top_n[r],
// logprob[r, 1 + j] / top_ids[r, j] = the j-th most likely token (descending
// logprob, ties to the lower id). logprob [n_rows, 1 + max_top_n] f32,
// top_ids [n_rows, max_top_n] i32, top_n[r] <= max_top_n <= 20.
void token_logprobs(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                    const int32_t* token, const int32_t* top_n, int32_t max_top_n, float* logprob,
                    int32_t* top_ids, cudaStream_t stream);

constexpr int32_t kMaxTopLogprobs = 20;

}  // namespace specstack::cuda

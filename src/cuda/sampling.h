// Token choice and MoE routing on the device, so neither needs a round trip
// of logits through host memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

// Grammar masks (model/logit_masks.h) on the device: row r of the logits may
// only take the tokens whose bit is set in bits[row_mask[r]] (token t: bit
// t % 32 of word t / 32 of that row's ceil(vocab / 32) words); row_mask[r] < 0,
// or bits null: every token.
struct TokenMaskRows {
  const uint32_t* bits = nullptr;     // [n_masks, ceil(vocab / 32)]
  const int32_t* row_mask = nullptr;  // [n_rows]
};

// Per row r of logits [n_rows, vocab] f32 (row stride ld), a masked token
// (see `mask`) read as -inf before anything else:
//  * temperature[r] <= 0: out[r] = argmax (the lowest index among equal maxima);
//  * else p = softmax(logits / temperature) in fp32; keep the top_k[r] most
//    likely tokens (0 = all; every token tied with the k-th is kept too), then
//    the most likely tokens whose mass first reaches top_p[r] (ties at the
//    cut kept), then drop those below min_p[r] times the most likely one's
//    probability (min_p null: none), renormalise, and return the first token
//    in index order whose cumulative kept probability exceeds uniform[r] *
//    (kept mass). (model/row_sampling.h: the same rule on the host.)
// uniform [n_rows] in [0, 1) from the host's seeded generator, out [n_rows] i32.
// CPU twin: sample_tokens_reference (tests/cuda), the same rule.
void sample_tokens(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                   const float* temperature, const int32_t* top_k, const float* top_p,
                   const float* min_p, const float* uniform, const TokenMaskRows& mask,
                   int32_t* out, cudaStream_t stream);

// sample_tokens' greedy rule for rows the caller knows are all greedy
// (temperature <= 0): out[r] = the lowest index of the row's largest logit,
// read as sample_tokens reads it (NaN as -inf, -0 as +0, masked tokens -inf;
// a row of -inf picks 0). Bit-identical to sample_tokens on such rows, on
// many CTAs a row (greedy_tokens.cu). workspace: greedy_workspace_words(n_rows,
// vocab) words, no initial contents. n_rows <= kGreedyTokensMaxRows (a grid
// dimension; sample_tokens takes larger steps).
constexpr int32_t kGreedyTokensMaxRows = 65535;
size_t greedy_workspace_words(int32_t n_rows, int32_t vocab);
void greedy_tokens(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                   const TokenMaskRows& mask, unsigned long long* workspace, int32_t* out,
                   cudaStream_t stream);

// MoE routing: probs = softmax(router_logits[t, :]) in fp32 over all
// experts; ids[t, :] = the k most likely experts in descending order (ties:
// lower index first); weights[t, i] = probs of ids[t, i], divided by their sum
// when renormalize. router_logits [n_tokens, n_experts] f32 (n_experts <= 1024),
// ids [n_tokens, k] i32, weights [n_tokens, k] f32.
// CPU twin: softmax_rows + the partial sort in Transformer::moe_mlp.
void moe_topk(const float* router_logits, int32_t n_tokens, int32_t n_experts, int32_t k,
              bool renormalize, int32_t* ids, float* weights, cudaStream_t stream);

}  // namespace specstack::cuda

// Speculative verification on the device (model/row_verification.h is the
// contract; verify_rows there is the CPU twin): a draft's kept logit rows and
// the target's verification rows, compared by modified rejection sampling on
// the processed distributions of the sampling rule (cuda/sampling.h), so only
// (n_accepted, next token) per sequence crosses to the host.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

// Copies row r of logits [n_rows, vocab] f32 to row keep[r] of kept
// [.., vocab] where keep[r] >= 0 (a draft keeping the rows it drew from).
void keep_logit_rows(const float* logits, int32_t n_rows, int32_t vocab, const int32_t* keep,
                     float* kept, cudaStream_t stream);

// n_chunks verifications, all pointers on the device. Chunk c has k_c =
// chunks[3c + 2] (1 <= k_c <= max_k) draft tokens tokens[c * max_k + i]:
// target rows chunks[3c] + 0 .. k_c of target (p_0 .. p_k, row stride
// target_ld, vocab columns) and draft rows chunks[3c + 1] + 0 .. k_c - 1 of
// draft (q_0 .. q_{k-1}, stride draft_ld, draft_vocab <= vocab columns; q = 0
// past them); the rule's temperature / top_p / min_p in params[3c ..] and
// top_k[c] on both sides; uniforms[c * (max_k + 1) + j] the request's next
// ones. Token i is accepted iff u_i * q_i(x_i) < p_i(x_i); at the first
// rejection the next token is the residual norm(max(0, p_i - q_i)) drawn by
// the sampling rule's inverse CDF in token order with u_{i+1} (p_i itself if
// that is all zero), else the bonus drawn from p_k with u_k.
// out [n_chunks, 2]: n_accepted, next token. With `picked` set ([target
// rows], e.g. the sampling kernel's picks), chunk c's rows there become the
// tokens it emitted: row chunks[3c] + i the i-th (i <= n_accepted).
struct DraftVerification {
  const float* target = nullptr;
  int64_t target_ld = 0;
  int32_t vocab = 0;
  const float* draft = nullptr;
  int64_t draft_ld = 0;
  int32_t draft_vocab = 0;
  int32_t n_chunks = 0;
  int32_t max_k = 0;
  const int32_t* chunks = nullptr;  // [n_chunks, 3] first target row, first draft row, k
  const int32_t* tokens = nullptr;  // [n_chunks, max_k]
  const float* uniforms = nullptr;  // [n_chunks, max_k + 1]
  const float* params = nullptr;    // [n_chunks, 3] temperature, top_p, min_p
  const int32_t* top_k = nullptr;   // [n_chunks]
  int32_t* picked = nullptr;        // [target rows] or null
};

// Device scratch verify_draft_rows needs (one summary per row it reads).
size_t verify_scratch_bytes(int32_t n_chunks, int32_t max_k);

void verify_draft_rows(const DraftVerification& in, void* scratch, int32_t* out,
                       cudaStream_t stream);

}  // namespace specstack::cuda

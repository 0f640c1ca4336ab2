// Speculative verification on the device (contract in verification.h).
//
// Two kernels. describe_rows, one 1024-thread CTA per row read (k + 1 target
// rows and k draft rows a chunk), runs the sampling rule's search
// (apply_row_rule, as sample_tokens does) and keeps its result instead of
// drawing: the max, 1 / T, the kept threshold tau, min-p's weight floor and
// the kept mass S, so any token's processed probability is one read:
//   P(x) = order_key(l_x) >= tau ? dw(l_x) / S : 0      (greedy: x == argmax).
// verify_chunks, one CTA per chunk, walks the draft tokens with those
// (every thread the same test, CTA-uniform), then draws the next token over
// the vocabulary with the rule's inverse CDF (draw(), token order): from the
// residual max(0, P_p - P_q) at the first rejection, from p_k after all.
// fp32 throughout, so the device realises the rule up to fp32 rounding of
// the compared masses, as sample_tokens does; verify_rows (model/) is the
// rule in double on the host.
#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/sampling_rule.cuh"
#include "cuda/verification.h"

namespace specstack::cuda {
namespace {

struct RowSummary {
  float m;
  float inv_t;
  uint32_t tau;
  float min_w;
  float mass;
  int32_t arg;
  int32_t greedy;  // temperature <= 0 or an all -inf row: the argmax's one-hot
};

// The processed probability of token x whose raw logit is `raw`.
__device__ __forceinline__ float row_prob(const RowSummary& s, float raw, int x) {
  if (s.greedy) return x == s.arg ? 1.0f : 0.0f;
  const float v = clean_logit(raw);
  if (order_key(v) < s.tau) return 0.0f;
  const DrawWeights dw{Weights{s.m, s.inv_t}, s.min_w};
  return dw(v) / s.mass;
}

// Items are the residual weights max(0, P_p(i) - P_q(i)).
struct ResidualSource {
  const float* p_row;  // [vocab]
  const float* q_row;  // [draft_vocab]
  int draft_vocab;
  RowSummary p, q;
  static constexpr bool vec = false;
  __device__ float operator()(int i) const {
    const float pi = row_prob(p, p_row[i], i);
    const float qi = i < draft_vocab ? row_prob(q, q_row[i], i) : 0.0f;
    return fmaxf(0.0f, pi - qi);
  }
  __device__ float4 load4(int) const { return make_float4(0, 0, 0, 0); }  // unused
  __device__ uint32_t bits4(int) const { return 0xFu; }                   // unused
};

struct Identity {
  __device__ float operator()(float v) const { return v; }
};

__global__ void keep_rows_kernel(const float* logits, int32_t vocab, const int32_t* keep,
                                 float* kept) {
  const int32_t to = keep[blockIdx.x];
  if (to < 0) return;
  const float* from = logits + int64_t{blockIdx.x} * vocab;  // [vocab]
  float* dst = kept + int64_t{to} * vocab;                   // [vocab]
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) dst[i] = from[i];
}

__device__ __forceinline__ const RowSummary* chunk_summaries(const void* scratch, int c,
                                                             int max_k) {
  return static_cast<const RowSummary*>(scratch) + int64_t{c} * (2 * max_k + 1);
}

// Grid (2 * max_k + 1, n_chunks): x <= k: target row x; k < x <= 2k: draft row x - k - 1.
__global__ void __launch_bounds__(kThreads)
    describe_rows_kernel(DraftVerification in, RowSummary* summaries) {
  __shared__ SampleShared sh;
  const int c = blockIdx.y, j = blockIdx.x;
  const int k = in.chunks[3 * c + 2];
  if (j > 2 * k) return;  // CTA-uniform
  const bool target = j <= k;
  const float* row = target ? in.target + (in.chunks[3 * c] + j) * in.target_ld
                            : in.draft + (in.chunks[3 * c + 1] + (j - k - 1)) * in.draft_ld;
  const int vocab = target ? in.vocab : in.draft_vocab;
  const RowSource src{row, nullptr, reinterpret_cast<uintptr_t>(row) % 16 == 0 && vocab % 4 == 0};
  RowSummary* out = summaries + int64_t{c} * (2 * in.max_k + 1) + j;
  const float* params = in.params + 3 * c;
  apply_row_rule(
      src, vocab, params[0], in.top_k[c], params[1], params[2], sh,
      [&](int token) {
        if (threadIdx.x == 0) *out = RowSummary{0.0f, 0.0f, 0u, 0.0f, 1.0f, token, 1};
      },
      [&](int n, const auto& items, const auto&, uint32_t tau, const DrawWeights& dw) {
        float part = 0.0f;
        for_strided(n, items, [&](int, float v) {
          if (order_key(v) >= tau) part = __fadd_rn(part, dw(v));
        });
        const float mass = cta_sum(part, sh);  // >= 1: the max is kept with weight 1
        if (threadIdx.x == 0) *out = RowSummary{dw.w.m, dw.w.inv_t, tau, dw.min_w, mass, 0, 0};
      });
}

// The next token drawn from p itself (bonus row, or a residual that rounding
// left empty), by the sampling rule: its argmax for a greedy row.
__device__ void draw_from_p(const DraftVerification& in, const RowSummary& p, const float* row,
                            float u, SampleShared& sh, int32_t* next) {
  if (p.greedy) {
    if (threadIdx.x == 0) *next = p.arg;
    return;
  }
  const RowSource src{row, nullptr,
                      reinterpret_cast<uintptr_t>(row) % 16 == 0 && in.vocab % 4 == 0};
  draw(
      in.vocab, src, [](int i) { return i; }, p.tau, DrawWeights{Weights{p.m, p.inv_t}, p.min_w}, u,
      sh, next);
}

__global__ void __launch_bounds__(kThreads)
    verify_chunks_kernel(DraftVerification in, const RowSummary* summaries, int32_t* out) {
  __shared__ SampleShared sh;
  const int c = blockIdx.x;
  const int first_row = in.chunks[3 * c], first_draft = in.chunks[3 * c + 1];
  const int k = in.chunks[3 * c + 2];
  const RowSummary* s = chunk_summaries(summaries, c, in.max_k);  // p_0..p_k, q_0..q_{k-1}
  const int32_t* tokens = in.tokens + int64_t{c} * in.max_k;
  const float* u = in.uniforms + int64_t{c} * (in.max_k + 1);
  const auto p_row = [&](int i) { return in.target + (first_row + i) * in.target_ld; };
  const auto q_row = [&](int i) { return in.draft + (first_draft + i) * in.draft_ld; };
  const auto token_of = [](int i) { return i; };

  int n_accepted = 0;
  for (; n_accepted < k; ++n_accepted) {
    const int x = tokens[n_accepted];
    const float px = row_prob(s[n_accepted], p_row(n_accepted)[x], x);
    const float qx =
        x < in.draft_vocab ? row_prob(s[k + 1 + n_accepted], q_row(n_accepted)[x], x) : 0.0f;
    // u * q < p: q(x) = 0 (a draft that could not draw x) accepts where p(x) > 0.
    if (!(u[n_accepted] * qx < px)) break;
  }
  int32_t* next = out + 2 * c + 1;
  if (threadIdx.x == 0) out[2 * c] = n_accepted;
  // The row the next token comes from: the residual of row n_accepted, or p_k.
  const int i = n_accepted;
  const float next_u = u[i < k ? i + 1 : k];
  bool drawn = false;  // CTA-uniform: cta_sum gives every thread the same bits
  if (i < k) {
    const ResidualSource residual{p_row(i), q_row(i), in.draft_vocab, s[i], s[k + 1 + i]};
    float part = 0.0f;
    for_strided(in.vocab, residual, [&](int, float r) { part = __fadd_rn(part, r); });
    if (cta_sum(part, sh) > 0.0f) {
      draw(in.vocab, residual, token_of, 0u, Identity{}, next_u, sh, next);
      drawn = true;
    }
    // Else p <= q everywhere: p == q up to rounding; p keeps the output exact.
  }
  if (!drawn) draw_from_p(in, s[i], p_row(i), next_u, sh, next);
  if (in.picked == nullptr) return;
  __syncthreads();  // the drawing thread's *next is visible to thread 0
  if (threadIdx.x == 0) {
    for (int j = 0; j < i; ++j) in.picked[first_row + j] = tokens[j];
    in.picked[first_row + i] = *next;
  }
}

}  // namespace

void keep_logit_rows(const float* logits, int32_t n_rows, int32_t vocab, const int32_t* keep,
                     float* kept, cudaStream_t stream) {
  if (n_rows <= 0) return;
  keep_rows_kernel<<<n_rows, 256, 0, stream>>>(logits, vocab, keep, kept);
  SS_CUDA_CHECK_LAUNCH();
}

size_t verify_scratch_bytes(int32_t n_chunks, int32_t max_k) {
  return sizeof(RowSummary) * size_t(n_chunks) * size_t(2 * max_k + 1);
}

void verify_draft_rows(const DraftVerification& in, void* scratch, int32_t* out,
                       cudaStream_t stream) {
  if (in.n_chunks <= 0) return;
  SS_CHECK_GE(in.max_k, 1);
  SS_CHECK(in.draft_vocab > 0 && in.draft_vocab <= in.vocab);
  auto* summaries = static_cast<RowSummary*>(scratch);
  describe_rows_kernel<<<dim3(2 * in.max_k + 1, in.n_chunks), kThreads, 0, stream>>>(in, summaries);
  SS_CUDA_CHECK_LAUNCH();
  verify_chunks_kernel<<<in.n_chunks, kThreads, 0, stream>>>(in, summaries, out);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

// Token choice and MoE routing on the device (contracts in sampling.h).
//
// sample_tokens: one 1024-thread CTA per row. The exact rule
// (tests/cuda/sampling_test.cpp implements it on the CPU as
// sample_tokens_reference):
//   l_i  = logits[r, i], NaN read as -inf and -0 as +0, and -inf where the
//         row's grammar mask clears token i's bit;  m = max_i l_i.
//   temperature <= 0 (or NaN), or m = -inf: the lowest i with l_i = m.
//   w_i  = l_i == m ? 1 : expf((l_i - m) * (1 / T))      (p_i = w_i / sum w)
//   top-k (0 < k < vocab): t_k = the k-th largest l (counted with
//         multiplicity); K1 = {i : l_i >= t_k}; otherwise K1 = every token.
//   top-p (p < 1): t_p = the largest l value v >= t_k such that
//         sum_{i in K1, l_i >= v} w_i >= p * sum_{i in K1} w_i (t_k itself
//         always qualifies); otherwise t_p = t_k.
//   min-p (after top-k and top-p, as vLLM): v_i = w_i < min_p ? 0 : w_i
//         (the max has w = 1 and stays); no min-p: v_i = w_i.
//   kept K = {i : l_i >= t_p}; S = sum_K v_i; target = uniform * S.
//   out = the first i in index order with sum_{j <= i, j in K} v_j > target;
//         when rounding leaves none, the last i in K with v_i > 0.
// Ties are therefore ties of the logit value (tokens whose fp32 weights only
// round to the same value are not ties). Sums are fp32, so the GPU realises
// the rule up to fp32 rounding of the masses compared.
//
// How: the thresholds are found by an 8-ary search on the order-preserving
// uint32 key of the logit ("count / mass of keys >= K" at 7 K per pass), no
// sort. Over the whole row that costs ~11 passes, so first one histogram pass
// (distance from the max in 1/16 nats: exact counts, and truncated
// fixed-point masses, a lower bound, for top-p) picks a cut {l >= c} that
// provably holds the kept set. When the cut holds at most kCap tokens they
// are copied to shared memory in token order and the searches and the draw
// run there. Tokens more than 128 nats below the max have w = 0 exactly, so
// leaving them out changes no sum and no draw. Larger cuts (flat rows with a
// wide nucleus, huge top_k) use the passes over the row.
// Every fp32 sum is a fixed per-thread order plus a fixed butterfly tree
// (accumulations use __fadd_rn so no FMA contraction can differ between
// passes): deterministic, bit-identical in every thread (loop bounds stay
// CTA-uniform) and monotone in the set summed (the search is sound).
//
// moe_topk: one warp per token, probabilities in shared memory, k rounds of
// warp argmax (ties to the lower expert id) as the CPU's partial sort.
#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/sampling.h"
#include "cuda/sampling_rule.cuh"

namespace specstack::cuda {
namespace {

__global__ void __launch_bounds__(kThreads)
    sample_tokens_kernel(const float* logits, int32_t vocab, int64_t ld, const float* temperature,
                         const int32_t* top_k, const float* top_p, const float* min_p,
                         const float* uniform, const uint32_t* mask_bits, const int32_t* mask_rows,
                         int32_t* out) {
  __shared__ SampleShared sh;
  const int64_t r = blockIdx.x;
  const float* row = logits + r * ld;  // [vocab]
  const uint32_t* mask = nullptr;      // [ceil(vocab / 32)]
  if (mask_bits != nullptr && mask_rows != nullptr && mask_rows[r] >= 0) {
    mask = mask_bits + static_cast<int64_t>(mask_rows[r]) * ((vocab + 31) / 32);
  }
  const RowSource row_logit{row, mask,
                            reinterpret_cast<uintptr_t>(row) % 16 == 0 && vocab % 4 == 0};
  const float u = uniform[r];
  apply_row_rule(
      row_logit, vocab, temperature[r], top_k[r], top_p[r], min_p != nullptr ? min_p[r] : 0.0f, sh,
      [&](int token) {
        if (threadIdx.x == 0) out[r] = token;
      },
      [&](int n, const auto& src, const auto& index_of, uint32_t tau, const DrawWeights& dw) {
        draw(n, src, index_of, tau, dw, u, sh, out + r);
      });
}

constexpr int kMoeWarps = 4;  // tokens per CTA, one warp each
constexpr int kMaxExperts = 1024;

__global__ void moe_topk_kernel(const float* router_logits, int32_t n_tokens, int32_t n_experts,
                                int32_t k, bool renormalize, int32_t* ids, float* weights) {
  __shared__ float probs_all[kMoeWarps][kMaxExperts];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kMoeWarps + warp;
  if (t >= n_tokens) return;                         // warp-uniform; only warp-level sync below
  const float* row = router_logits + t * n_experts;  // [n_experts]
  float* probs = probs_all[warp];                    // [n_experts]

  // softmax as CpuBackend::softmax_rows: exp(x - max), then times 1 / sum.
  float mx = -INFINITY;
  for (int e = lane; e < n_experts; e += kWarp) mx = fmaxf(mx, row[e]);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
  }
  float sum = 0.0f;
  for (int e = lane; e < n_experts; e += kWarp) {
    const float v = expf(row[e] - mx);
    probs[e] = v;
    sum += v;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int e = lane; e < n_experts; e += kWarp) probs[e] *= inv;
  __syncwarp();

  // k rounds of argmax; a chosen expert is marked -1 (below every probability).
  float total = 0.0f;
  float my_weight = 0.0f;
  int my_id = 0;
  for (int s = 0; s < k; ++s) {
    float best = -2.0f;  // below the mark, so any unchosen expert wins
    int best_e = INT_MAX;
    for (int e = lane; e < n_experts; e += kWarp) {
      const float v = probs[e];
      if (v > best) {  // ascending e: strict > keeps the lower id
        best = v;
        best_e = e;
      }
    }
    warp_argmax(best, best_e);
    total += best;  // in rank order, as the CPU sums them
    if (lane == s) {
      my_weight = best;
      my_id = best_e;
    }
    __syncwarp();  // every lane has read probs before the owner marks it
    if (lane == best_e % kWarp) probs[best_e] = -1.0f;
    __syncwarp();
  }
  if (lane < k) {
    ids[t * k + lane] = my_id;
    weights[t * k + lane] = renormalize ? my_weight / total : my_weight;
  }
}

}  // namespace

void sample_tokens(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                   const float* temperature, const int32_t* top_k, const float* top_p,
                   const float* min_p, const float* uniform, const TokenMaskRows& mask,
                   int32_t* out, cudaStream_t stream) {
  if (n_rows <= 0) return;
  SS_CHECK_GT(vocab, 0);
  SS_CHECK_GE(ld, int64_t{vocab});
  sample_tokens_kernel<<<n_rows, kThreads, 0, stream>>>(
      logits, vocab, ld, temperature, top_k, top_p, min_p, uniform, mask.bits, mask.row_mask, out);
  SS_CUDA_CHECK_LAUNCH();
}

void moe_topk(const float* router_logits, int32_t n_tokens, int32_t n_experts, int32_t k,
              bool renormalize, int32_t* ids, float* weights, cudaStream_t stream) {
  if (n_tokens <= 0) return;
  SS_CHECK(n_experts > 0 && n_experts <= kMaxExperts);
  SS_CHECK(k > 0 && k <= n_experts && k <= kWarp);
  const int blocks = (n_tokens + kMoeWarps - 1) / kMoeWarps;
  moe_topk_kernel<<<blocks, kMoeWarps * kWarp, 0, stream>>>(router_logits, n_tokens, n_experts, k,
                                                            renormalize, ids, weights);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

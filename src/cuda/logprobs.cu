// token_logprobs (contract in logprobs.h): one 1024-thread CTA per row. Pass 1
// the max, pass 2 the normaliser (exp in double, per-thread sums in index
// order, then a fixed tree), then top_n rounds of a CTA argmax over the
// tokens that come after the previous pick in (logprob desc, id asc) order:
// no sort and no scratch per row; the row stays in L2 between rounds (it was
// just written by the LM head).
#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/logprobs.h"

namespace specstack::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 1024;
constexpr int kUnroll = 4;  // loads in flight per thread: the passes are latency-bound
constexpr int kWarps = kThreads / kWarp;

struct Best {
  float v;
  int i;  // INT_MAX: none
};

// The better of two: higher logprob, then lower id (none loses).
__device__ __forceinline__ Best better(Best a, Best b) {
  if (b.i == INT_MAX) return a;
  if (a.i == INT_MAX) return b;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__device__ Best block_best(Best x, Best* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    Best o{__shfl_xor_sync(0xffffffffu, x.v, offset), __shfl_xor_sync(0xffffffffu, x.i, offset)};
    x = better(x, o);
  }
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  Best y = lane < kWarps ? scratch[lane] : Best{-INFINITY, INT_MAX};
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    Best o{__shfl_xor_sync(0xffffffffu, y.v, offset), __shfl_xor_sync(0xffffffffu, y.i, offset)};
    y = better(y, o);
  }
  __syncthreads();
  return y;
}

__device__ double block_sum(double v, double* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  double total = lane < kWarps ? scratch[lane] : 0.0;
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  __syncthreads();
  return total;
}

// f(i, row[i]) for this thread's tokens i = t + j * kThreads, kUnroll loads
// issued before they are used.
template <typename F>
__device__ __forceinline__ void for_tokens(const float* row, int vocab, F&& f) {
  for (int base = threadIdx.x; base < vocab; base += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      v[u] = i < vocab ? row[i] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads < vocab) f(base + u * kThreads, v[u]);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    token_logprobs_kernel(const float* logits, int32_t vocab, int64_t ld, const int32_t* token,
                          const int32_t* top_n, int32_t max_top_n, float* logprob,
                          int32_t* top_ids) {
  __shared__ Best best_scratch[kWarps];
  __shared__ double sum_scratch[kWarps];
  const int64_t r = blockIdx.x;
  const int32_t n = top_n[r];
  if (n < 0) return;                   // CTA-uniform
  const float* row = logits + r * ld;  // [vocab]

  Best m{-INFINITY, INT_MAX};
  for_tokens(row, vocab, [&](int i, float v) {
    if (!isnan(v)) m = better(m, Best{v, i});
  });
  const float max_logit = block_best(m, best_scratch).v;
  double z = 0.0;
  for_tokens(row, vocab, [&](int, float v) {
    if (!isnan(v)) z += exp(static_cast<double>(v) - static_cast<double>(max_logit));
  });
  z = block_sum(z, sum_scratch);
  const float log_total = static_cast<float>(log(z)) + max_logit;
  const auto lp = [&](float v) { return isnan(v) ? -INFINITY : v - log_total; };
  float* out = logprob + r * (1 + max_top_n);
  if (threadIdx.x == 0) out[0] = lp(row[token[r]]);

  Best prev{INFINITY, -1};  // every token comes after it
  for (int j = 0; j < min(n, vocab); ++j) {
    Best b{-INFINITY, INT_MAX};
    for_tokens(row, vocab, [&](int i, float raw) {
      const float v = lp(raw);
      if (v < prev.v || (v == prev.v && i > prev.i)) b = better(b, Best{v, i});
    });
    prev = block_best(b, best_scratch);
    if (threadIdx.x == 0) {
      out[1 + j] = prev.v;
      top_ids[r * max_top_n + j] = prev.i;
    }
  }
}

}  // namespace

void token_logprobs(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                    const int32_t* token, const int32_t* top_n, int32_t max_top_n, float* logprob,
                    int32_t* top_ids, cudaStream_t stream) {
  if (n_rows <= 0) return;
  SS_CHECK_GT(vocab, 0);
  SS_CHECK_GE(ld, int64_t{vocab});
  SS_CHECK(max_top_n >= 0 && max_top_n <= kMaxTopLogprobs);
  token_logprobs_kernel<<<n_rows, kThreads, 0, stream>>>(logits, vocab, ld, token, top_n, max_top_n,
                                                         logprob, top_ids);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

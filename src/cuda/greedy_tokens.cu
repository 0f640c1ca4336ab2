// greedy_tokens (contract in sampling.h): sample_tokens' greedy rule over
// many CTAs a row. sample_tokens gives a row one CTA, which reads a 150K-vocab
// row (~600 KB) from one SM in ~15 us (H100): on the critical path of every
// greedy step of a small model (a 0.5B decode step is ~1 ms), of
// SpecPrefill's lookahead and of a speculative draft's proposals.
//
// Pass 1, grid (splits, rows): each CTA takes a contiguous slice of the row,
// reads it as the rule does (admit: NaN as -inf, -0 as +0, masked tokens
// -inf) and writes its best as one 64-bit key, order_key(value) << 32 |
// ~index, so that the larger key is the larger value, then the lower index,
// as in the one-CTA pass. Pass 2, a warp a row: the max of the row's keys,
// unpacked into out[r]. No atomics: the result is the same max in any order.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/sampling.h"
#include "cuda/sampling_rule.cuh"

namespace specstack::cuda {
namespace {

constexpr int kGreedyThreads = 256;
// Floats a CTA reads at least: ~10 CTAs for a 150K vocab at one row, enough
// for the loads to stream without a CTA's start outweighing its share.
constexpr int kSliceMin = 16384;
constexpr int kMaxSplits = 64;

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Every slice is non-empty, so a row's max key is a real one (> 0).
__device__ __forceinline__ unsigned long long greedy_key(float v, int i) {
  return (static_cast<unsigned long long>(order_key(v)) << 32) |
         static_cast<unsigned long long>(~static_cast<uint32_t>(i));
}

__global__ void __launch_bounds__(kGreedyThreads)
    greedy_slices_kernel(const float* logits, int32_t vocab, int64_t ld, int32_t slice,
                         const uint32_t* mask_bits, const int32_t* mask_rows,
                         unsigned long long* keys) {
  pdl_begin();
  __shared__ unsigned long long warp_keys[kGreedyThreads / kWarp];
  const int64_t r = blockIdx.y;
  const float* row = logits + r * ld;  // [vocab]
  const uint32_t* mask = nullptr;      // [ceil(vocab / 32)]
  if (mask_bits != nullptr && mask_rows != nullptr && mask_rows[r] >= 0) {
    mask = mask_bits + static_cast<int64_t>(mask_rows[r]) * ((vocab + 31) / 32);
  }
  const RowSource src{row, mask, reinterpret_cast<uintptr_t>(row) % 16 == 0 && vocab % 4 == 0};
  const int first = static_cast<int>(blockIdx.x) * slice;  // slice % 4 == 0
  const int last = min(vocab, first + slice);
  unsigned long long key = 0;  // below every real key (order_key(-inf) > 0)
  if (src.vec) {
    for (int i = first + 4 * static_cast<int>(threadIdx.x); i < last; i += 4 * kGreedyThreads) {
      const float4 v = src.load4(i);
      const uint32_t b = src.bits4(i);
      key = max(key, greedy_key(admit(v.x, b & 1u), i));
      key = max(key, greedy_key(admit(v.y, b & 2u), i + 1));
      key = max(key, greedy_key(admit(v.z, b & 4u), i + 2));
      key = max(key, greedy_key(admit(v.w, b & 8u), i + 3));
    }
  } else {
    for (int i = first + static_cast<int>(threadIdx.x); i < last; i += kGreedyThreads) {
      key = max(key, greedy_key(src(i), i));
    }
  }
  key = warp_max(key);
  if (threadIdx.x % kWarp == 0) warp_keys[threadIdx.x / kWarp] = key;
  __syncthreads();
  if (threadIdx.x < kWarp) {
    key = threadIdx.x < kGreedyThreads / kWarp ? warp_keys[threadIdx.x] : 0;
    key = warp_max(key);
    if (threadIdx.x == 0) keys[r * gridDim.x + blockIdx.x] = key;
  }
}

// One warp a row: the max of its `splits` keys.
__global__ void greedy_pick_kernel(int32_t n_rows, int32_t splits, const unsigned long long* keys,
                                   int32_t* out) {
  pdl_begin();
  const int64_t r = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (r >= n_rows) return;  // warp-uniform
  unsigned long long key = 0;
  for (int s = lane; s < splits; s += kWarp) key = max(key, keys[r * splits + s]);
  key = warp_max(key);
  if (lane == 0) out[r] = static_cast<int32_t>(~static_cast<uint32_t>(key & 0xffffffffu));
}

}  // namespace

// The slices of a row: at least kSliceMin floats each (a multiple of 4, so
// float4 groups never straddle two CTAs), at most kMaxSplits.
int32_t greedy_slice(int32_t vocab) {
  const int32_t splits = std::max(1, std::min(kMaxSplits, vocab / kSliceMin));
  return ((vocab + splits - 1) / splits + 3) / 4 * 4;
}

size_t greedy_workspace_words(int32_t n_rows, int32_t vocab) {
  if (n_rows <= 0 || vocab <= 0) return 0;
  const int32_t slice = greedy_slice(vocab);
  return static_cast<size_t>(n_rows) * static_cast<size_t>((vocab + slice - 1) / slice);
}

void greedy_tokens(const float* logits, int32_t n_rows, int32_t vocab, int64_t ld,
                   const TokenMaskRows& mask, unsigned long long* workspace, int32_t* out,
                   cudaStream_t stream) {
  if (n_rows <= 0) return;
  SS_CHECK_GT(vocab, 0);
  SS_CHECK_GE(ld, int64_t{vocab});
  SS_CHECK_LE(n_rows, kGreedyTokensMaxRows);  // gridDim.y
  SS_CHECK(workspace != nullptr);
  const int32_t slice = greedy_slice(vocab);
  const int32_t splits = (vocab + slice - 1) / slice;
  // Not a programmatic launch: the stream's last operation is the pick
  // inputs' upload or a graph launch (cuda/pdl.h).
  launch_pdl(greedy_slices_kernel,
             dim3(static_cast<unsigned>(splits), static_cast<unsigned>(n_rows)), kGreedyThreads, 0,
             stream, false, logits, vocab, ld, slice, mask.bits, mask.row_mask, workspace);
  constexpr int kPickThreads = 128;  // 4 rows a CTA
  const int64_t threads = int64_t{n_rows} * kWarp;
  launch_pdl(greedy_pick_kernel,
             dim3(static_cast<unsigned>((threads + kPickThreads - 1) / kPickThreads)), kPickThreads,
             0, stream, true, n_rows, splits, static_cast<const unsigned long long*>(workspace),
             out);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

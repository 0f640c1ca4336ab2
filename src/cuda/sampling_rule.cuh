// The sampling kernels' rule on the device, shared by sample_tokens
// (sampling.cu) and speculative verification (verification.cu): CTA
// reductions, the threshold searches and the inverse-CDF draw, and
// apply_row_rule, which finds a row's kept set (the rule is written out at
// the top of sampling.cu). Included by .cu files only; everything is in an
// anonymous namespace, one copy per kernel file.
#pragma once

#include <climits>
#include <cstdint>

namespace specstack::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 1024;  // sample_tokens CTA
constexpr int kWarps = kThreads / kWarp;
// Loads in flight per thread (the passes are latency bound): scalars, or float4s.
constexpr int kUnroll = 8;
constexpr int kVecUnroll = 4;
constexpr int kBins = 2048;
constexpr float kBinsPerNat = 16.0f;
constexpr float kRangeNats = kBins / kBinsPerNat;  // 128: expf(-d) is 0 from ~104 on
constexpr int kCap = 4096;                         // candidates held in shared memory
constexpr int kWays = 8;                           // threshold search: 8-ary
constexpr int kSlots = kCap / kThreads;            // candidate slots per thread
constexpr int kWarpItems = 1024;                   // up to this many: searched by one warp
// w in 16-bit fixed point, truncated: a per-bin sum (even one that wraps
// modulo 2^32) never exceeds the true mass, so the cut stays conservative.
constexpr float kFixedOne = 65536.0f;

using u64 = unsigned long long;

// NaN must neither win nor poison a sum; -0 and +0 must share one key.
__device__ __forceinline__ float clean_logit(float v) {
  if (isnan(v)) return -INFINITY;
  return v == 0.0f ? 0.0f : v;
}

// Monotone map float -> uint32 (a < b iff key(a) < key(b) for non-NaN).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0 ? ~bits : (bits | 0x80000000u);
}

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// (value, index) argmax: the larger value, the lower index among equals.
__device__ __forceinline__ void warp_argmax(float& v, int& i) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
    const int oi = __shfl_xor_sync(0xffffffffu, i, offset);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
}

struct SampleShared {
  union {
    struct {
      int count[kBins];      // tokens per distance bin
      uint32_t mass[kBins];  // their weights in fixed point (top-p without top-k only)
    } hist;
    struct {
      float logit[kCap];  // cleaned logits of the candidates, in token order
      int index[kCap];    // their token ids
    } cand;
  } u;
  float chunk[kThreads];  // per-thread chunk sums, then their warp-local prefix
  float warp_prefix[kWarps];
  float f[kWarps];
  u64 scan[kWarps];
  float multi_f[kWarps][kWays - 1];
  int multi_n[kWarps][kWays - 1];
  int idx[kWarps];
  int cut_bin, n_cand;
  uint32_t tau;
};

// CTA-wide reductions; every thread returns the same bits (each warp reduces
// all the partials itself with the same butterfly). The trailing barrier
// frees the scratch for the next call.
__device__ float cta_sum(float v, SampleShared& sh) {
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) sh.f[threadIdx.x / kWarp] = v;
  __syncthreads();
  const float total = warp_sum(sh.f[threadIdx.x % kWarp]);
  __syncthreads();
  return total;
}

__device__ void cta_argmax(float& v, int& i, SampleShared& sh) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  warp_argmax(v, i);
  if (lane == 0) {
    sh.f[warp] = v;
    sh.idx[warp] = i;
  }
  __syncthreads();
  v = sh.f[lane];
  i = sh.idx[lane];
  warp_argmax(v, i);
  __syncthreads();
}

// Inclusive prefix over threads of exact integers; `total` gets the sum.
__device__ u64 cta_inclusive_scan(u64 v, u64& total, SampleShared& sh) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const u64 t = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += t;
  }
  if (lane == kWarp - 1) sh.scan[warp] = v;
  __syncthreads();
  u64 before = 0;
  total = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sh.scan[w];
    total += sh.scan[w];
  }
  __syncthreads();
  return before + v;
}

// A raw logit as the rule reads it: cleaned, or -inf when its mask bit is clear.
__device__ __forceinline__ float admit(float v, uint32_t bit) {
  return bit != 0 ? clean_logit(v) : -INFINITY;
}

// Where a pass reads its items: the row in global memory (float4 loads when
// aligned) under its grammar mask, or the candidates in shared memory (taken
// from the row through its mask). get(i) is the logit as the rule reads it.
struct RowSource {
  const float* row;
  const uint32_t* mask;  // [ceil(vocab / 32)] admitted tokens; null: every token
  bool vec;              // row 16-byte aligned and n % 4 == 0
  __device__ uint32_t bit(int i) const {
    return mask == nullptr ? 1u : (mask[i >> 5] >> (i & 31)) & 1u;
  }
  __device__ float operator()(int i) const { return admit(row[i], bit(i)); }
  __device__ float4 load4(int i) const { return *reinterpret_cast<const float4*>(row + i); }
  // The bits of tokens i .. i + 3 (i % 4 == 0: one word holds them all).
  __device__ uint32_t bits4(int i) const {
    return mask == nullptr ? 0xFu : (mask[i >> 5] >> (i & 31)) & 0xFu;
  }
};
struct SharedSource {
  const float* logit;
  static constexpr bool vec = false;
  __device__ float operator()(int i) const { return logit[i]; }
  __device__ float4 load4(int i) const { return make_float4(0, 0, 0, 0); }  // unused
  __device__ uint32_t bits4(int i) const { return 0xFu; }                   // unused
};

// f(i, get(i)) for this thread's items in ascending order: i = t + j * kThreads
// (scalars) or the float4 groups q = t + j * kThreads (vec), several loads
// issued before they are used.
template <typename Src, typename F>
__device__ __forceinline__ void for_strided(int n, const Src& src, F&& f) {
  if (src.vec) {
    const int n4 = n / 4;
    for (int base = threadIdx.x; base < n4; base += kVecUnroll * kThreads) {
      float4 v[kVecUnroll];
      uint32_t b[kVecUnroll];
#pragma unroll
      for (int u = 0; u < kVecUnroll; ++u) {
        const int q = base + u * kThreads;
        v[u] = q < n4 ? src.load4(4 * q) : make_float4(0, 0, 0, 0);
        b[u] = q < n4 ? src.bits4(4 * q) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kVecUnroll; ++u) {
        const int q = base + u * kThreads;
        if (q < n4) {
          f(4 * q, admit(v[u].x, b[u] & 1u));
          f(4 * q + 1, admit(v[u].y, b[u] & 2u));
          f(4 * q + 2, admit(v[u].z, b[u] & 4u));
          f(4 * q + 3, admit(v[u].w, b[u] & 8u));
        }
      }
    }
    return;
  }
  for (int base = threadIdx.x; base < n; base += kUnroll * kThreads) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      v[u] = i < n ? src(i) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads < n) f(base + u * kThreads, v[u]);
    }
  }
}

// The same over the contiguous items [begin, end), both multiples of 4 when vec.
template <typename Src, typename F>
__device__ __forceinline__ void for_contiguous(int begin, int end, const Src& src, F&& f) {
  if (src.vec) {
    for (int base = begin; base < end; base += 4 * kVecUnroll) {
      float4 v[kVecUnroll];
      uint32_t b[kVecUnroll];
#pragma unroll
      for (int u = 0; u < kVecUnroll; ++u) {
        const int i = base + 4 * u;
        v[u] = i < end ? src.load4(i) : make_float4(0, 0, 0, 0);
        b[u] = i < end ? src.bits4(i) : 0u;
      }
#pragma unroll
      for (int u = 0; u < kVecUnroll; ++u) {
        const int i = base + 4 * u;
        if (i < end) {
          f(i, admit(v[u].x, b[u] & 1u));
          f(i + 1, admit(v[u].y, b[u] & 2u));
          f(i + 2, admit(v[u].z, b[u] & 4u));
          f(i + 3, admit(v[u].w, b[u] & 8u));
        }
      }
    }
    return;
  }
  for (int base = begin; base < end; base += kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = base + u < end ? src(base + u) : 0.0f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u < end) f(base + u, v[u]);
    }
  }
}

// Per-thread contiguous chunks covering [0, n): a multiple of 4 when vec.
__device__ __forceinline__ int chunk_size(int n, bool vec) {
  const int chunk = (n + kThreads - 1) / kThreads;
  return vec ? (chunk + 3) / 4 * 4 : chunk;
}

// The row's softmax numerators (see the rule above).
struct Weights {
  float m, inv_t;
  __device__ float operator()(float v) const { return v == m ? 1.0f : expf((v - m) * inv_t); }
  // Distance bin of a logit: floor(16 * (m - v) / T), kBins when >= 128 nats.
  // (m - v) * inv_t is exactly minus the exponent above, so w = expf(-d).
  __device__ int bin(float v) const {
    const float d = v == m ? 0.0f : (m - v) * inv_t;
    return d < kRangeNats ? static_cast<int>(d * kBinsPerNat) : kBins;
  }
};

// The draw's weights: w, zeroed below min-p.
struct DrawWeights {
  Weights w;
  float min_w;
  __device__ float operator()(float v) const {
    const float x = w(v);
    return x < min_w ? 0.0f : x;
  }
};

// Sum of w over items [0, n) with key >= key_min.
template <typename Src>
__device__ float mass_at_least(int n, const Src& src, uint32_t key_min, const Weights& w,
                               SampleShared& sh) {
  float part = 0.0f;
  for_strided(n, src, [&](int, float v) {
    if (order_key(v) >= key_min) part = __fadd_rn(part, w(v));
  });
  return cta_sum(part, sh);
}

__device__ __forceinline__ float acc_add(float a, float b) {
  return __fadd_rn(a, b);
}
__device__ __forceinline__ int acc_add(int a, int b) {
  return a + b;
}
__device__ __forceinline__ float (&multi_scratch(SampleShared& sh, float))[kWarps][kWays - 1] {
  return sh.multi_f;
}
__device__ __forceinline__ int (&multi_scratch(SampleShared& sh, int))[kWarps][kWays - 1] {
  return sh.multi_n;
}

// The largest key K in [lo, hi] with M(K) >= goal, where M(K) = the sum of
// value(v) over the items with key(v) >= K (a count, or the mass) and lo is
// known to qualify. kWays-ary search: each pass over the items evaluates M at
// kWays - 1 thresholds at once, cutting [lo, hi] kWays-fold. M(K) is always
// computed the same way (per-thread ascending sums, fixed trees), so it is a
// deterministic monotone function and the search is exact.
template <typename T, typename Src, typename Value>
__device__ uint32_t largest_key(int n, const Src& src, const Value& value, T goal, uint32_t lo,
                                uint32_t hi, SampleShared& sh) {
  auto& scratch = multi_scratch(sh, T{});
  while (lo < hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    uint32_t t[kWays - 1];  // ascending thresholds in (lo, hi] (equal ones are harmless)
    T acc[kWays - 1];
#pragma unroll
    for (int j = 0; j < kWays - 1; ++j) {
      t[j] = lo + static_cast<uint32_t>(span * (j + 1) / kWays);
      acc[j] = T{};
    }
    for_strided(n, src, [&](int, float v) {
      const uint32_t key = order_key(v);
      if (key < t[0]) return;
      const T x = value(v);
#pragma unroll
      for (int j = 0; j < kWays - 1; ++j) {
        if (key >= t[j]) acc[j] = acc_add(acc[j], x);
      }
    });
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
    for (int j = 0; j < kWays - 1; ++j) {
      acc[j] = warp_sum(acc[j]);
      if (lane == 0) scratch[warp][j] = acc[j];
    }
    __syncthreads();
    // Every warp reduces the partials itself: CTA-uniform bits, no broadcast.
    int best = -1;  // the last threshold that qualifies (M falls as K rises)
#pragma unroll
    for (int j = 0; j < kWays - 1; ++j) {
      if (warp_sum(scratch[lane][j]) >= goal) best = j;
    }
    __syncthreads();
    const uint32_t new_lo = best < 0 ? lo : t[best];
    hi = best + 1 < kWays - 1 ? t[best + 1] - 1 : hi;
    lo = new_lo;
  }
  return lo;
}

// One warp's versions for candidates in shared memory: bisection with warp
// sums only (lane-strided ascending sums, then the butterfly).
template <typename T, typename Value>
__device__ uint32_t warp_largest_key(int n, const float* logit, const Value& value, T goal,
                                     uint32_t lo, uint32_t hi) {
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo + 1) / 2;  // hi <= key(+inf): no overflow
    T acc = T{};
    for (int j = threadIdx.x % kWarp; j < n; j += kWarp) {
      const float v = logit[j];
      if (order_key(v) >= mid) acc = acc_add(acc, value(v));
    }
    if (warp_sum(acc) >= goal) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

__device__ float warp_mass_at_least(int n, const float* logit, uint32_t key_min, const Weights& w) {
  float acc = 0.0f;
  for (int j = threadIdx.x % kWarp; j < n; j += kWarp) {
    const float v = logit[j];
    if (order_key(v) >= key_min) acc = __fadd_rn(acc, w(v));
  }
  return warp_sum(acc);
}

// Largest key with count(key >= it) >= k, and with mass(key >= it) >= needed.
template <typename Src>
__device__ uint32_t top_k_key(int n, const Src& src, int k, uint32_t lo, uint32_t hi,
                              SampleShared& sh) {
  const auto one = [](float) { return 1; };
  return largest_key<int>(n, src, one, k, lo, hi, sh);
}

template <typename Src>
__device__ uint32_t top_p_key(int n, const Src& src, float needed, uint32_t lo, uint32_t hi,
                              const Weights& w, SampleShared& sh) {
  return largest_key<float>(n, src, w, needed, lo, hi, sh);
}

// Inverse CDF over the kept items {key >= tau} of [0, n) in item order (which
// is token order); writes index_of(pick) to *out. Thread j owns the
// contiguous chunk [j * chunk, (j + 1) * chunk). The running sum before item
// e of chunk j is defined as base(warp) + (local_prev(j) + c_e) with c_e the
// sequential in-chunk sum: sequential scans (lane 0 over its warp's 32
// chunks, thread 0 over the 32 warps) make it monotone along the items and
// make a chunk's end value equal the next chunk's start value bit for bit, so
// the chunk whose end first exceeds the target holds the crossing and a zero
// weight can never be the pick.
template <typename Src, typename Index, typename W>
__device__ void draw(int n, const Src& get, const Index& index_of, uint32_t tau, const W& w,
                     float uniform, SampleShared& sh, int32_t* out) {
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int chunk = chunk_size(n, get.vec);
  const int begin = min(n, tid * chunk);
  const int end = min(n, begin + chunk);
  float c = 0.0f;
  for_contiguous(begin, end, get, [&](int, float v) {
    if (order_key(v) >= tau) c = __fadd_rn(c, w(v));
  });
  sh.chunk[tid] = c;
  __syncthreads();
  if (lane == 0) {
    float acc = 0.0f;
    for (int j = 0; j < kWarp; ++j) {
      acc = __fadd_rn(acc, sh.chunk[tid + j]);
      sh.chunk[tid + j] = acc;  // warp-local inclusive prefix
    }
    sh.f[warp] = acc;
  }
  __syncthreads();
  if (tid == 0) {
    float acc = 0.0f;
    for (int j = 0; j < kWarps; ++j) {
      acc = __fadd_rn(acc, sh.f[j]);
      sh.warp_prefix[j] = acc;
    }
  }
  __syncthreads();
  const float base = warp == 0 ? 0.0f : sh.warp_prefix[warp - 1];
  const float local_prev = lane == 0 ? 0.0f : sh.chunk[tid - 1];
  const float inclusive = __fadd_rn(base, sh.chunk[tid]);
  const float target = uniform * sh.warp_prefix[kWarps - 1];  // S >= 1: the max is kept
  // Monotone flags: the first crossing thread is the count of the others.
  const int n_crossed = __syncthreads_count(inclusive > target);
  if (n_crossed > 0) {
    if (tid == kThreads - n_crossed) {
      int pick = end - 1;  // unreachable: the crossing is inside this chunk
      float cc = 0.0f;
      for (int i = begin; i < end; ++i) {
        const float v = get(i);
        if (order_key(v) < tau) continue;
        cc = __fadd_rn(cc, w(v));
        if (__fadd_rn(base, __fadd_rn(local_prev, cc)) > target) {
          pick = i;
          break;
        }
      }
      *out = index_of(pick);
    }
    return;
  }
  // target rounded up to S: the last kept item with any weight. The argmax of
  // (found, -item) is the highest such item.
  int last = -1;
  for_strided(n, get, [&](int i, float v) {
    if (order_key(v) >= tau && w(v) > 0.0f) last = i;
  });
  float found = last >= 0 ? 1.0f : 0.0f;
  int neg = last >= 0 ? -last : INT_MAX;
  cta_argmax(found, neg, sh);
  if (tid == 0) *out = index_of(max(0, -neg));  // neg > -INT_MAX: the max token qualifies
}

// The rule of sample_tokens (sampling.cu's header) for one row, called by
// every thread of a kThreads CTA: greedy(token) when temperature <= 0 or the
// row is all -inf; otherwise finish(n, src, index_of, tau, dw), where items
// [0, n) of src (the whole row, or the candidates in shared memory, in token
// order; index_of maps an item to its token) hold every token with weight,
// the kept ones are those with order_key >= tau, and dw(v) is a kept item's
// weight in the draw (min-p applied). k: top-k (0: off), p: top-p (1: off),
// min_p: min-p (0: off).
template <typename Greedy, typename Finish>
__device__ void apply_row_rule(const RowSource& row_logit, int32_t vocab, float temp, int32_t k,
                               float p, float min_p, SampleShared& sh, Greedy&& greedy,
                               Finish&& finish) {
  const int tid = threadIdx.x;
  const auto token_of = [](int i) { return i; };

  // Pass 1: max and the lowest index holding it.
  float m = -INFINITY;
  int arg = INT_MAX;
  for_strided(vocab, row_logit, [&](int i, float v) {
    if (arg == INT_MAX || v > m) {  // ascending i: strict > keeps the lowest index
      m = v;
      arg = i;
    }
  });
  cta_argmax(m, arg, sh);
  if (!(temp > 0.0f) || m == -INFINITY) {
    greedy(arg < vocab ? arg : 0);
    return;  // CTA-uniform
  }
  const Weights w{m, 1.0f / temp};
  const DrawWeights dw{w, min_p};
  const uint32_t key_max = order_key(m);
  const bool top_k_on = k > 0 && k < vocab;
  const bool top_p_on = p < 1.0f;
  if (!top_k_on && !top_p_on) {
    finish(vocab, row_logit, token_of, 0u, dw);
    return;
  }

  // Pass 2: distance histogram; the total mass when top-p alone needs it.
  const bool need_mass = !top_k_on;
  for (int b = tid; b < kBins; b += kThreads) {
    sh.u.hist.count[b] = 0;
    sh.u.hist.mass[b] = 0;
  }
  __syncthreads();
  float z_part = 0.0f;
  for_strided(vocab, row_logit, [&](int, float v) {
    const int b = w.bin(v);
    if (need_mass) {
      const float wv = w(v);
      z_part = __fadd_rn(z_part, wv);
      if (b < kBins) atomicAdd(&sh.u.hist.mass[b], __float2uint_rz(wv * kFixedOne));
    }
    if (b < kBins) atomicAdd(&sh.u.hist.count[b], 1);
  });
  __syncthreads();
  const float z_all = need_mass ? cta_sum(z_part, sh) : 0.0f;

  // The cut bin: the first whose cumulative count reaches k (top-k), or whose
  // cumulative fixed-point mass (a lower bound: truncated) reaches p * Z with
  // margin (top-p alone); the last bin when none does. Thread t owns bins
  // 2t and 2t + 1.
  static_assert(kBins == 2 * kThreads);
  const u64 c0 = sh.u.hist.count[2 * tid], c1 = sh.u.hist.count[2 * tid + 1];
  const u64 m0 = sh.u.hist.mass[2 * tid], m1 = sh.u.hist.mass[2 * tid + 1];
  u64 count_total = 0, mass_total = 0;
  const u64 count_incl = cta_inclusive_scan(c0 + c1, count_total, sh);
  const u64 mass_incl = need_mass ? cta_inclusive_scan(m0 + m1, mass_total, sh) : 0;
  const u64 count_prev = count_incl - c0 - c1;
  // Whether the cumulative measure before bin 2t, up to bin 2t (first) or up
  // to 2t + 1 (second) reaches the goal (an empty prefix never does).
  bool reach_first, reach_second, reach_before;
  if (top_k_on) {
    reach_before = count_prev >= static_cast<u64>(k);
    reach_first = count_prev + c0 >= static_cast<u64>(k);
    reach_second = count_incl >= static_cast<u64>(k);
  } else {
    const double goal = static_cast<double>(p) * z_all * (1.0 + 1e-5) * kFixedOne;
    const u64 mass_prev = mass_incl - m0 - m1;
    reach_before = tid > 0 && static_cast<double>(mass_prev) >= goal;  // goal <= 0: bin 0
    reach_first = static_cast<double>(mass_prev + m0) >= goal;
    reach_second = static_cast<double>(mass_incl) >= goal;
  }
  if (tid == 0) {
    sh.cut_bin = kBins - 1;
    sh.n_cand = static_cast<int>(min(count_total, static_cast<u64>(INT_MAX)));
  }
  __syncthreads();
  if (!reach_before && reach_first) {
    sh.cut_bin = 2 * tid;
    sh.n_cand = static_cast<int>(min(count_prev + c0, static_cast<u64>(INT_MAX)));
  } else if (!reach_first && reach_second) {
    sh.cut_bin = 2 * tid + 1;
    sh.n_cand = static_cast<int>(min(count_incl, static_cast<u64>(INT_MAX)));
  }
  __syncthreads();
  const int cut_bin = sh.cut_bin;
  const int n_cand = sh.n_cand;
  // With fewer than k tokens in range, t_k lies among zero-weight tokens.
  const bool k_in_range = top_k_on && count_total >= static_cast<u64>(k);

  if (n_cand > kCap) {  // the passes over the whole row
    uint32_t tau = top_k_on ? top_k_key(vocab, row_logit, k, 0u, key_max, sh) : 0u;
    if (top_p_on) {
      const float z1 = mass_at_least(vocab, row_logit, tau, w, sh);
      tau = top_p_key(vocab, row_logit, p * z1, tau, key_max, w, sh);
    }
    finish(vocab, row_logit, token_of, tau, dw);
    return;
  }

  // Pass 3: the candidates {bin <= cut_bin} to shared memory in token order.
  // Thread t walks its contiguous chunk and keeps its first kSlots candidates
  // in slots [kSlots * t, kSlots * (t + 1)); then the slots are packed. Only
  // when some chunk holds more does a second walk write every candidate at
  // its exclusive-scan position. (Every read of the histogram, which this
  // overwrites, is behind a barrier.)
  const int chunk = chunk_size(vocab, row_logit.vec);
  const int begin = min(vocab, tid * chunk);
  const int end = min(vocab, begin + chunk);
  int mine = 0;
  for_contiguous(begin, end, row_logit, [&](int i, float v) {
    if (w.bin(v) <= cut_bin) {
      if (mine < kSlots) {
        sh.u.cand.logit[kSlots * tid + mine] = v;
        sh.u.cand.index[kSlots * tid + mine] = i;
      }
      ++mine;
    }
  });
  u64 n_total = 0;
  if (__syncthreads_or(mine > kSlots)) {
    int pos = static_cast<int>(cta_inclusive_scan(mine, n_total, sh)) - mine;
    for_contiguous(begin, end, row_logit, [&](int i, float v) {
      if (w.bin(v) <= cut_bin) {
        if (pos < kCap) {  // always: n_total == n_cand <= kCap
          sh.u.cand.logit[pos] = v;
          sh.u.cand.index[pos] = i;
        }
        ++pos;
      }
    });
  } else {
    float v[kSlots];
    int token[kSlots];
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      v[j] = j < mine ? sh.u.cand.logit[kSlots * tid + j] : 0.0f;
      token[j] = j < mine ? sh.u.cand.index[kSlots * tid + j] : 0;
    }
    // The scan's barriers order every slot read before any packed write.
    const int pos = static_cast<int>(cta_inclusive_scan(mine, n_total, sh)) - mine;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      if (j < mine) {
        sh.u.cand.logit[pos + j] = v[j];
        sh.u.cand.index[pos + j] = token[j];
      }
    }
  }
  __syncthreads();
  const int n = static_cast<int>(min(n_total, static_cast<u64>(kCap)));
  const SharedSource cand_logit{sh.u.cand.logit};
  const auto cand_token = [&](int j) { return sh.u.cand.index[j]; };
  // Every token outside holds less mass than the cut needs (or none), so the
  // searches over the candidates find the thresholds of the whole row; a
  // threshold below every candidate keeps only zero-weight tokens more.
  uint32_t tau = 0;
  if (n <= kWarpItems) {  // few candidates: one warp, no CTA barriers per step
    if (tid < kWarp) {
      const auto one = [](float) { return 1; };
      uint32_t t = k_in_range ? warp_largest_key(n, sh.u.cand.logit, one, k, 0u, key_max) : 0u;
      if (top_p_on) {
        const float z1 = top_k_on ? warp_mass_at_least(n, sh.u.cand.logit, t, w) : z_all;
        t = warp_largest_key(n, sh.u.cand.logit, w, p * z1, t, key_max);
      }
      if (tid == 0) sh.tau = t;
    }
    __syncthreads();
    tau = sh.tau;
  } else {
    tau = k_in_range ? top_k_key(n, cand_logit, k, 0u, key_max, sh) : 0u;
    if (top_p_on) {
      const float z1 = top_k_on ? mass_at_least(n, cand_logit, tau, w, sh) : z_all;
      tau = top_p_key(n, cand_logit, p * z1, tau, key_max, w, sh);
    }
  }
  finish(n, cand_logit, cand_token, tau, dw);
}

}  // namespace
}  // namespace specstack::cuda

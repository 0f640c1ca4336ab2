// FP8 (e4m3) prefill attention for Hopper; contract and precision in
// flash_attention_fp8.h. The attention kernel is flash_attention_hopper.cu's
// (warp-specialised producer + 64-row consumer warpgroups, online softmax on
// the accumulators, S of tile t issued with P V of tile t - 1, ping-pong at
// head dim 128) on e4m3 operands that three small passes prepare:
//
//   fp8_kv_amax_kernel      per (kv head, dim) amax of K and V over keys [0, n_keys)
//   fp8_kv_quantize_kernel  K -> k8 [kv head, key, dim], V -> vt8 [kv head, dim, key]
//   fp8_q_quantize_kernel   q * k_scale -> q8 [row, head, dim] + q_scale [row, head]
//
// e4m3 wgmma takes both operands K-major. S = Q K^T: Q and K rows are head_dim
// bytes in 128-byte swizzled rows (at head dim 64 the row's second half is
// never written nor read: two k-steps instead of four, the one swizzle mode
// the FP8 GEMMs here already use, for 144 KB of shared memory instead of 100).
// O = P V: the B operand is V^T (rows = dims, 128 keys = 128 bytes a row,
// 128-byte swizzle), written so by the quantize pass, and A = P from registers. The A fragment of
// an m64nNk32 e4m3 MMA holds, per thread (g = lane / 4, t = lane % 4), k = 4t ..
// 4t + 3 and 16 + 4t .. of rows g and g + 8, while the S accumulator holds
// columns 8j + 2t + {0, 1}; rather than shuffle P between lanes, V^T stores
// the keys of each 32-key group in the order the accumulator already has them
// (fp8_attention_vt_position), so a thread packs its own S values:
//   a0 = s[16kk + {0, 1, 4, 5}], a1 = s[16kk + {2, 3, 6, 7}] (row g + 8),
//   a2 = s[16kk + {8, 9, 12, 13}], a3 = s[16kk + {10, 11, 14, 15}]
// for the k-step of keys 32kk .. 32kk + 31.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/flash_attention_fp8.h"
#include "cuda/flash_attention_hopper.h"
#include "cuda/flash_attention_softmax.cuh"
#include "cuda/fp8_device.cuh"
#include "cuda/sm90a.h"
#include "cuda/wgmma.cuh"

namespace specstack::cuda {

namespace {

constexpr int kBlockN = 128;    // keys per tile
constexpr int kAmaxKeys = 256;  // keys per CTA of the amax pass
constexpr int kAmaxThreads = 256;
constexpr int kGroupKeys = 32;  // keys per CTA of the K / V quantize pass
constexpr int kQuantThreads = 256;

template <int kHeadDim>
struct Fp8Tiling {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims of the e4m3 kernel");
  // As the bf16 kernel: head dim 128 two ping-pong consumers, 64 three.
  static constexpr int kConsumers = kHeadDim == 64 ? 3 : 2;
  static constexpr bool kPingPong = kConsumers == 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // Registers after setmaxnreg (nvcc 13.0 -Xptxas -v: 0 spills). The
  // producer's unrolled copies (8 K + 8 V chunks a tile at head dim 128) need
  // more than the bf16 producer's 40: it spilled at 40-56; the consumers hold
  // S 64 + O 64 + P 16 (e4m3) at head dim 128, 64 + 32 + 16 at 64.
  static constexpr int kProducerRegs = kConsumers == 2 ? 72 : 56;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 216 : 152;
  // e4m3 tiles are half the bf16 bytes: one stage more than the bf16 kernel.
  static constexpr int kStages = kHeadDim == 64 ? 4 : 3;
  // Shared memory, 1024-byte aligned sections: Q [consumers][64][128 B],
  // K [stages][128][128 B], V^T [stages][head_dim][128 B], the bf16
  // output staging [consumers][halves][64][128 B], mbarriers.
  static constexpr uint32_t kQTile = 64 * 128;  // 128-byte rows at both head dims
  static constexpr uint32_t kKTile = kBlockN * 128;
  static constexpr uint32_t kVTile = kHeadDim * kBlockN;
  static constexpr uint32_t kOutHalf = 64 * 128;
  static constexpr uint32_t kOutTile = kOutHalf * (kHeadDim / 64);
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + kConsumers * kQTile;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKTile;
  static constexpr uint32_t kOutOffset = kVOffset + kStages * kVTile;
  static constexpr uint32_t kBarOffset = kOutOffset + kConsumers * kOutTile;
  static constexpr uint32_t kSmemBytes = kBarOffset + 4 * kStages * 8 + 1024;
  static_assert(kSmemBytes + 1024 <= 227 * 1024, "shared memory of one CTA");
  static_assert(kQTile % 1024 == 0 && kKTile % 1024 == 0 && kVTile % 1024 == 0, "alignment");
};

// Workspace sections (bytes from the base, 256-aligned).
struct Sections {
  size_t k_bits, v_bits, k_scale, v_scale, k8, vt8, q8, q_scale, total;
  int32_t keys_padded;
};

size_t align256(size_t x) {
  return (x + 255) / 256 * 256;
}

Sections sections(const FlashAttentionArgs& a) {
  Sections s{};
  s.keys_padded = (a.n_keys + kBlockN - 1) / kBlockN * kBlockN;
  const size_t channels = size_t(a.n_kv_heads) * a.head_dim;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t here = at;
    at = align256(at + bytes);
    return here;
  };
  s.k_bits = take(channels * 4);
  s.v_bits = take(channels * 4);
  s.k_scale = take(channels * 4);
  s.v_scale = take(channels * 4);
  s.k8 = take(channels * size_t(s.keys_padded));
  s.vt8 = take(channels * size_t(s.keys_padded));
  s.q8 = take(size_t(std::max(a.n_rows, 0)) * a.n_heads * a.head_dim);
  s.q_scale = take(size_t(std::max(a.n_rows, 0)) * a.n_heads * 4);
  s.total = at;
  return s;
}

__host__ __device__ inline int32_t vt_position(int32_t j) {
  // Key column j = 16 h + 8 i_hi + 2 t + i_lo of a 32-key group is the A
  // fragment's k = 16 h + 4 t + 2 i_hi + i_lo (see the file comment).
  const int32_t h = j >> 4, i_hi = (j >> 3) & 1, t = (j >> 1) & 3, i_lo = j & 1;
  return 16 * h + 4 * t + 2 * i_hi + i_lo;
}

// Element offset in k_cache / v_cache of 16-byte chunk c (dims 8 c .. 8 c + 7)
// of kv head kvh of key (< n_keys), through the block table.
__device__ __forceinline__ int64_t chunk_offset(const FlashAttentionArgs& a, int32_t key,
                                                int32_t kvh, int32_t c) {
  const int64_t row =
      int64_t{__ldg(a.block_table + key / a.block_size)} * a.block_size + key % a.block_size;
  return (row * a.n_kv_heads + kvh) * a.head_dim + 8 * c;
}

// Grid (ceil(n_keys / kAmaxKeys), n_kv_heads), block kAmaxThreads: the CTA's
// keys in rounds of kAmaxThreads / (head_dim / 8) keys, a thread one 16-byte
// chunk of K and of V per round, every round's loads issued before any is
// folded (a thread walking its keys one load at a time was a chain of ~64
// dependent round trips); then the channel amax over the CTA in shared memory
// and one atomicMax per channel (as f32 bits: non-negative floats order as
// unsigned integers). H100, session 46: the whole e4m3 call at 1696 rows went
// 186 -> 267 TFLOP/s (0.52x -> 0.75x the bf16 kernel), 4096 454 -> 528, 8192
// 654 -> 692-700; 32K unchanged (the passes are a few % of it there).
__global__ void __launch_bounds__(kAmaxThreads)
    fp8_kv_amax_kernel(const FlashAttentionArgs a, uint32_t* k_bits, uint32_t* v_bits) {
  __shared__ float part[2][kAmaxThreads][8 + 1];  // per thread: its chunk's 8 dims, K and V
  const int32_t kvh = blockIdx.y, hd = a.head_dim, chunks = hd / 8;
  const int32_t per_round = kAmaxThreads / chunks, c = threadIdx.x % chunks;
  const int32_t first = blockIdx.x * kAmaxKeys;
  float km[8] = {}, vm[8] = {};
  constexpr int kRounds = 4;  // loads in flight per thread: 2 x kRounds
  for (int32_t base = first; base < first + kAmaxKeys; base += per_round * kRounds) {
    uint4 kr[kRounds], vr[kRounds];
#pragma unroll
    for (int u = 0; u < kRounds; ++u) {
      const int32_t key = base + u * per_round + threadIdx.x / chunks;
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      if (key < min(first + kAmaxKeys, a.n_keys)) {
        const int64_t at = chunk_offset(a, key, kvh, c);
        kr[u] = *reinterpret_cast<const uint4*>(a.k_cache + at);
        vr[u] = *reinterpret_cast<const uint4*>(a.v_cache + at);
      }
    }
#pragma unroll
    for (int u = 0; u < kRounds; ++u) {
      const auto* k2 = reinterpret_cast<const __nv_bfloat162*>(&kr[u]);
      const auto* v2 = reinterpret_cast<const __nv_bfloat162*>(&vr[u]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 kf = __bfloat1622float2(k2[e]), vf = __bfloat1622float2(v2[e]);
        km[2 * e] = fmaxf(km[2 * e], fabsf(kf.x));
        km[2 * e + 1] = fmaxf(km[2 * e + 1], fabsf(kf.y));
        vm[2 * e] = fmaxf(vm[2 * e], fabsf(vf.x));
        vm[2 * e + 1] = fmaxf(vm[2 * e + 1], fabsf(vf.y));
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    part[0][threadIdx.x][e] = km[e];
    part[1][threadIdx.x][e] = vm[e];
  }
  __syncthreads();
  // Thread i < head_dim folds channel i over the threads that held its chunk.
  if (static_cast<int32_t>(threadIdx.x) < hd) {
    const int32_t ch = threadIdx.x / 8, e = threadIdx.x % 8;
    float k = 0.0f, v = 0.0f;
    for (int32_t t = ch; t < per_round * chunks; t += chunks) {
      k = fmaxf(k, part[0][t][e]);
      v = fmaxf(v, part[1][t][e]);
    }
    atomicMax(k_bits + kvh * hd + threadIdx.x, __float_as_uint(k));
    atomicMax(v_bits + kvh * hd + threadIdx.x, __float_as_uint(v));
  }
}

// Grid (keys_padded / 32, n_kv_heads), block kQuantThreads. Keys past n_keys
// become zeros. CTA (0, kvh) also writes that head's f32 channel scales.
__global__ void __launch_bounds__(kQuantThreads)
    fp8_kv_quantize_kernel(const FlashAttentionArgs a, const uint32_t* k_bits,
                           const uint32_t* v_bits, int32_t keys_padded, float* k_scale,
                           float* v_scale, uint8_t* k8, uint8_t* vt8) {
  extern __shared__ float v_s[];  // [32][head_dim + 1] V of the group, f32
  const int32_t hd = a.head_dim, kvh = blockIdx.y, key0 = blockIdx.x * kGroupKeys;
  const uint32_t* kb = k_bits + kvh * hd;
  const uint32_t* vb = v_bits + kvh * hd;
  if (blockIdx.x == 0) {
    for (int32_t d = threadIdx.x; d < hd; d += blockDim.x) {
      k_scale[kvh * hd + d] = fp8_row_scale(__uint_as_float(kb[d]));
      v_scale[kvh * hd + d] = fp8_row_scale(__uint_as_float(vb[d]));
    }
  }
  // K: 8 dims (16 bytes of bf16) a thread-step, straight to k8.
  const int32_t chunks = hd / 8;
  for (int32_t i = threadIdx.x; i < kGroupKeys * chunks; i += blockDim.x) {
    const int32_t r = i / chunks, c = i % chunks, key = key0 + r;
    uint2 out = make_uint2(0, 0);
    if (key < a.n_keys) {
      const uint4 raw = *reinterpret_cast<const uint4*>(a.k_cache + chunk_offset(a, key, kvh, c));
      const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
      auto* o2 = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 f = __bfloat1622float2(x2[e]);
        const int32_t d = 8 * c + 2 * e;
        o2[e] =
            __nv_cvt_float2_to_fp8x2(make_float2(f.x * fp8_row_factor(__uint_as_float(kb[d])),
                                                 f.y * fp8_row_factor(__uint_as_float(kb[d + 1]))),
                                     __NV_SATFINITE, __NV_E4M3);
      }
    }
    *reinterpret_cast<uint2*>(k8 + (int64_t{kvh} * keys_padded + key) * hd + 8 * c) = out;
  }
  // V: the group into shared memory, then rows of V^T, 4 keys (bytes) a thread-step.
  for (int32_t i = threadIdx.x; i < kGroupKeys * chunks; i += blockDim.x) {
    const int32_t r = i / chunks, c = i % chunks, key = key0 + r;
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (key < a.n_keys) {
      raw = *reinterpret_cast<const uint4*>(a.v_cache + chunk_offset(a, key, kvh, c));
    }
    const auto* x2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(x2[e]);
      v_s[r * (hd + 1) + 8 * c + 2 * e] = f.x;
      v_s[r * (hd + 1) + 8 * c + 2 * e + 1] = f.y;
    }
  }
  __syncthreads();
  for (int32_t i = threadIdx.x; i < hd * (kGroupKeys / 4); i += blockDim.x) {
    const int32_t d = i / (kGroupKeys / 4), k4 = 4 * (i % (kGroupKeys / 4));
    const float f = fp8_row_factor(__uint_as_float(vb[d]));
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      // Position k = k4 + e holds the key j with vt_position(j) = k.
      const int32_t k = k4 + e;
      const int32_t h = k >> 4, t = (k >> 2) & 3, i_hi = (k >> 1) & 1, i_lo = k & 1;
      const int32_t j = 16 * h + 8 * i_hi + 2 * t + i_lo;
      x[e] = v_s[j * (hd + 1) + d] * f;
    }
    uint32_t packed;
    auto* p2 = reinterpret_cast<__nv_fp8x2_storage_t*>(&packed);
    p2[0] = __nv_cvt_float2_to_fp8x2(make_float2(x[0], x[1]), __NV_SATFINITE, __NV_E4M3);
    p2[1] = __nv_cvt_float2_to_fp8x2(make_float2(x[2], x[3]), __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint32_t*>(vt8 + (int64_t{kvh} * hd + d) * keys_padded + key0 + k4) = packed;
  }
}

// Grid (n_rows, ceil(n_heads / 4)), block 128: warp w quantizes head 4 y + w
// of its row: q * k_scale of the head's kv head, amax over the head, e4m3.
__global__ void __launch_bounds__(128)
    fp8_q_quantize_kernel(const FlashAttentionArgs a, const float* k_scale, uint8_t* q8,
                          float* q_scale) {
  const int32_t row = blockIdx.x, head = blockIdx.y * 4 + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (head >= a.n_heads) return;
  const int32_t hd = a.head_dim, per = hd / 32;  // 4 or 2 dims a lane
  const int32_t kvh = head / (a.n_heads / a.n_kv_heads);
  const __nv_bfloat16* q = a.q + int64_t{row} * a.q_stride + int64_t{head} * hd + per * lane;
  const float* ks = k_scale + kvh * hd + per * lane;
  float x[4] = {0, 0, 0, 0};
  float amax = 0.0f;
  for (int e = 0; e < per; ++e) {
    x[e] = __bfloat162float(q[e]) * ks[e];
    amax = fmaxf(amax, fabsf(x[e]));
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float f = fp8_row_factor(amax);
  uint8_t* out = q8 + (int64_t{row} * a.n_heads + head) * hd + per * lane;
  for (int e = 0; e < per; e += 2) {
    *reinterpret_cast<__nv_fp8x2_storage_t*>(out + e) =
        __nv_cvt_float2_to_fp8x2(make_float2(x[e] * f, x[e + 1] * f), __NV_SATFINITE, __NV_E4M3);
  }
  if (lane == 0) q_scale[int64_t{row} * a.n_heads + head] = fp8_row_scale(amax);
}

struct KernelArgs {
  const int32_t* q_slot;
  int32_t n_rows, n_keys, n_heads, n_kv_heads, keys_padded;
  float scale;
  const uint8_t* q8;
  const float* q_scale;
  const uint8_t* k8;
  const uint8_t* vt8;
  const float* v_scale;
  __nv_bfloat16* out;
  int64_t out_stride;
};

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBarConsumer = 1, kBarTurn = 4;

using namespace wg;

// Byte offset of 16-byte chunk c of row r in a K-major e4m3 tile of
// 128-byte swizzled rows.
__device__ __forceinline__ uint32_t fp8_swz(int r, int c) {
  return r * 128 + ((c ^ (r & 7)) << 4);
}

// S = Q K^T of one key tile: head_dim / 32 k-steps of 32 bytes.
template <int kHeadDim>
__device__ __forceinline__ void gemm_qk(float (&s)[64], uint32_t q_addr, uint32_t k_addr) {
  fence_regs(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 32; ++kk) {
    wgmma_m64n128_e4m3(s, make_desc(q_addr + 32 * kk, 16, 1024),
                       make_desc(k_addr + 32 * kk, 16, 1024), kk > 0);
  }
  wgmma_commit();
  fence_regs(s);
}

// O += P V of one key tile: 4 k-steps of 32 keys, V^T rows of 128 bytes.
template <int kHeadDim>
__device__ __forceinline__ void gemm_pv(float (&o)[kHeadDim / 2], uint32_t (&p)[16],
                                        uint32_t vt_addr) {
  fence_regs(o);
  fence_regs(p);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
    wgmma_rs_e4m3(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
                  make_desc(vt_addr + 32 * kk, 16, 1024));
  }
  wgmma_commit();
  fence_regs(o);
  fence_regs(p);
}

__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

#endif  // !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int kHeadDim>
__global__ void __launch_bounds__(Fp8Tiling<kHeadDim>::kThreads, 1)
    flash_attention_fp8_kernel(const __grid_constant__ KernelArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Fp8Tiling<kHeadDim>;
  constexpr int kConsumers = T::kConsumers, kBlockM = T::kBlockM, kStages = T::kStages;
  constexpr bool kPingPong = T::kPingPong;
  constexpr int kWarps = T::kThreads / 32;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ int32_t s_red[kWarps];
  __shared__ int32_t s_lim[kBlockM];
  const uint32_t raw_base = smem_u32(smem_raw);
  const uint32_t base = (raw_base + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw_base);
  const uint32_t bar = base + T::kBarOffset;
  auto full_k = [&](int s) { return bar + 8 * s; };
  auto empty_k = [&](int s) { return bar + 8 * (kStages + s); };
  auto full_v = [&](int s) { return bar + 8 * (2 * kStages + s); };
  auto empty_v = [&](int s) { return bar + 8 * (3 * kStages + s); };
  auto k_tile = [&](int s) { return base + T::kKOffset + s * T::kKTile; };
  auto v_tile = [&](int s) { return base + T::kVOffset + s * T::kVTile; };

  const int tid = threadIdx.x, lane = tid % 32;
  const int32_t head = blockIdx.x;
  const int32_t kv_head = head / (a.n_heads / a.n_kv_heads);
  const int32_t row0 = (gridDim.y - 1 - blockIdx.y) * kBlockM;  // heaviest blocks first

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 128);
      mbar_init(empty_k(s), 4 * kConsumers);
      mbar_init(full_v(s), 128);
      mbar_init(empty_v(s), 4 * kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  int32_t max_lim = -1;
  if (tid < kBlockM) {
    const int32_t r = row0 + tid;
    const int32_t lim = r < a.n_rows ? min(a.q_slot[r], a.n_keys - 1) : -1;
    s_lim[tid] = lim;
    max_lim = lim;
  }
  max_lim = __reduce_max_sync(kFullMask, max_lim);
  if (lane == 0) s_red[tid / 32] = max_lim;
  __syncthreads();  // also publishes the mbarrier init and s_lim
#pragma unroll
  for (int w = 0; w < kWarps; ++w) max_lim = max(max_lim, s_red[w]);
  const int32_t n_tiles = (max_lim + kBlockN) / kBlockN;  // tiles 0 .. holding max_lim

  if (tid < 128) {
    // ---- Producer: tile i's K rows (keys 128 i ..) and V^T rows (dims) from
    // the contiguous e4m3 copies, 16 bytes a cp.async, into stage i % kStages.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(T::kProducerRegs));
    constexpr int kKChunks = kHeadDim / 16;  // 16-byte chunks of a K row
    const uint8_t* const k_src = a.k8 + int64_t{kv_head} * a.keys_padded * kHeadDim;
    const uint8_t* const v_src = a.vt8 + int64_t{kv_head} * kHeadDim * a.keys_padded;
    // V of tile i - 1 goes after K of tile i, as the consumers use them.
    auto load_v = [&](int32_t i) {
      const int st = i % kStages;
      mbar_wait(empty_v(st), ((i / kStages) & 1) ^ 1);
#pragma unroll
      for (int u = 0; u < kHeadDim / 16; ++u) {  // kHeadDim rows x 8 chunks
        const int idx = tid + 128 * u, d = idx / 8, c = idx % 8;
        cp_async_16(v_tile(st) + d * 128 + ((c ^ (d & 7)) << 4),
                    v_src + int64_t{d} * a.keys_padded + int64_t{i} * kBlockN + 16 * c, 16);
      }
      cp_async_arrive(full_v(st));
    };
    for (int32_t i = 0; i < n_tiles; ++i) {
      const int st = i % kStages;
      mbar_wait(empty_k(st), ((i / kStages) & 1) ^ 1);
#pragma unroll
      for (int u = 0; u < kKChunks; ++u) {  // 128 rows x kKChunks chunks
        const int idx = tid + 128 * u, r = idx / kKChunks, c = idx % kKChunks;
        cp_async_16(k_tile(st) + fp8_swz(r, c),
                    k_src + (int64_t{i} * kBlockN + r) * kHeadDim + 16 * c, 16);
      }
      cp_async_arrive(full_k(st));
      if (i > 0) load_v(i - 1);
    }
    if (n_tiles > 0) load_v(n_tiles - 1);
    cp_async_wait_all();
  } else {
    // ---- Consumers: warpgroup cwg owns CTA rows 64 cwg .. + 63; this thread
    // holds rows ra and ra + 8 of S and O.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(T::kConsumerRegs));
    const int cwg = tid / 128 - 1;
    const int wtid = tid % 128, wi = wtid / 32, g = lane / 4, t4 = lane % 4;
    const int ra = 64 * cwg + 16 * wi + g;
    const int32_t lim0 = s_lim[ra], lim1 = s_lim[ra + 8];
    const bool ok0 = row0 + ra < a.n_rows, ok1 = row0 + ra + 8 < a.n_rows;
    const int32_t w_min_lim =
        __reduce_min_sync(kFullMask, min(ok0 ? lim0 : INT_MAX, ok1 ? lim1 : INT_MAX));
    const uint32_t q_addr = base + T::kQOffset + cwg * T::kQTile;

    constexpr int kQChunks = kHeadDim / 16;
#pragma unroll
    for (int u = 0; u < kQChunks / 2; ++u) {  // 64 rows x kQChunks chunks
      const int idx = wtid + 128 * u, r = idx / kQChunks, c = idx % kQChunks;
      const int32_t row = row0 + 64 * cwg + r;
      const bool ok = row < a.n_rows;
      const uint8_t* src = ok ? a.q8 + (int64_t{row} * a.n_heads + head) * kHeadDim + 16 * c : a.q8;
      cp_async_16(q_addr + fp8_swz(r, c), src, ok ? 16 : 0);
    }
    // Per row: softmax scale x log2 e x the row's Q scale.
    // (Rows past n_rows: Q is zeros, scale 1, never stored.)
    const float sq0 = ok0 ? a.q_scale[int64_t{row0 + ra} * a.n_heads + head] : 1.0f;
    const float sq1 = ok1 ? a.q_scale[int64_t{row0 + ra + 8} * a.n_heads + head] : 1.0f;
    const float scale_log2[2] = {a.scale * kLog2e * sq0, a.scale * kLog2e * sq1};
    cp_async_wait_all();
    fence_proxy_async();
    bar_sync(kBarConsumer + cwg, 128);

    auto release = [&](uint32_t b) {
      __syncwarp();
      if (lane == 0) mbar_arrive(b);
    };

    float o[kHeadDim / 2], s[64];
    uint32_t p[16];
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};

    auto softmax = [&](int32_t t) {
      const int32_t k0 = t * kBlockN;
      if (k0 + kBlockN - 1 > w_min_lim) flash_softmax::causal_mask<kBlockN>(s, k0, lim0, lim1, t4);
      flash_softmax::online_softmax<kBlockN>(s, row_max, row_sum, alpha, scale_log2[0],
                                             scale_log2[1]);
    };
    auto rescale_o = [&] { flash_softmax::rescale<kHeadDim>(o, alpha); };
    auto pack_p = [&] {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const int x = 16 * kk;
        p[4 * kk] = pack_e4m3x4(s[x], s[x + 1], s[x + 4], s[x + 5]);
        p[4 * kk + 1] = pack_e4m3x4(s[x + 2], s[x + 3], s[x + 6], s[x + 7]);
        p[4 * kk + 2] = pack_e4m3x4(s[x + 8], s[x + 9], s[x + 12], s[x + 13]);
        p[4 * kk + 3] = pack_e4m3x4(s[x + 10], s[x + 11], s[x + 14], s[x + 15]);
      }
    };

    if (n_tiles > 0) {
      if (kPingPong && cwg == 0) bar_arrive(kBarTurn, 256);
      mbar_wait(full_k(0), 0);
      fence_proxy_async();
      gemm_qk<kHeadDim>(s, q_addr, k_tile(0));
      wgmma_wait<0>();
      fence_regs(s);
      softmax(0);
      release(empty_k(0));
      pack_p();
      for (int32_t i = 1; i < n_tiles; ++i) {
        const int st = i % kStages, pst = (i - 1) % kStages;
        mbar_wait(full_k(st), (i / kStages) & 1);
        fence_proxy_async();
        if (kPingPong) bar_sync(kBarTurn + cwg, 256);
        gemm_qk<kHeadDim>(s, q_addr, k_tile(st));
        rescale_o();
        mbar_wait(full_v(pst), ((i - 1) / kStages) & 1);
        fence_proxy_async();
        gemm_pv<kHeadDim>(o, p, v_tile(pst));
        if (kPingPong) bar_arrive(kBarTurn + (cwg ^ 1), 256);
        wgmma_wait<1>();
        fence_regs(s);
        softmax(i);
        release(empty_k(st));
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(p);
        release(empty_v(pst));
        pack_p();
      }
      if (kPingPong && cwg == 0) bar_sync(kBarTurn, 256);
      const int32_t last = n_tiles - 1, lst = last % kStages;
      rescale_o();
      mbar_wait(full_v(lst), (last / kStages) & 1);
      fence_proxy_async();
      gemm_pv<kHeadDim>(o, p, v_tile(lst));
      wgmma_wait<0>();
      fence_regs(o);
      fence_regs(p);
      release(empty_v(lst));
    }

    // Epilogue: O / l times V's channel scales in bf16, staged (swizzled
    // halves of 64 dims) for 16-byte row stores.
    float inv[2];
    flash_softmax::inverse_row_sums(row_sum, inv);
    unsigned char* const s_out = smem + T::kOutOffset + cwg * T::kOutTile;
    const float* const vsc = a.v_scale + kv_head * kHeadDim;
    const int r = 16 * wi + g;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      const float2 sv = *reinterpret_cast<const float2*>(vsc + 8 * j + 2 * t4);
      *reinterpret_cast<uint32_t*>(s_out + swz_offset(r, j, T::kOutHalf) + 4 * t4) =
          pack_bf16(o[4 * j] * inv[0] * sv.x, o[4 * j + 1] * inv[0] * sv.y);
      *reinterpret_cast<uint32_t*>(s_out + swz_offset(r + 8, j, T::kOutHalf) + 4 * t4) =
          pack_bf16(o[4 * j + 2] * inv[1] * sv.x, o[4 * j + 3] * inv[1] * sv.y);
    }
    bar_sync(kBarConsumer + cwg, 128);
    constexpr int kOutChunks = kHeadDim / 8;
#pragma unroll
    for (int u = 0; u < kOutChunks / 2; ++u) {
      const int idx = wtid + 128 * u, rr = idx / kOutChunks, c = idx % kOutChunks;
      const int32_t row = row0 + 64 * cwg + rr;
      if (row < a.n_rows) {
        *reinterpret_cast<uint4*>(a.out + row * a.out_stride + int64_t{head} * kHeadDim + c * 8) =
            *reinterpret_cast<const uint4*>(s_out + swz_offset(rr, c, T::kOutHalf));
      }
    }
  }
#endif
}

template <int kHeadDim>
void launch_attention(const KernelArgs& k, const FlashAttentionArgs& a, cudaStream_t stream) {
  using T = Fp8Tiling<kHeadDim>;
  auto* kernel = flash_attention_fp8_kernel<kHeadDim>;
  SS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(T::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(a.n_heads),
                  static_cast<unsigned>((a.n_rows + T::kBlockM - 1) / T::kBlockM));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(k);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace

int32_t fp8_attention_vt_position(int32_t j) {
  return vt_position(j);
}

int32_t flash_attention_fp8_min_keys(int32_t head_dim) {
  return head_dim == 128 ? 8192 : 16384;
}

size_t flash_attention_fp8_workspace_bytes(const FlashAttentionArgs& args) {
  return sections(args).total;
}

Fp8AttentionOperands flash_attention_fp8_operands(const FlashAttentionArgs& args, void* workspace) {
  const Sections s = sections(args);
  auto* w = static_cast<unsigned char*>(workspace);
  Fp8AttentionOperands o;
  o.k_scale = reinterpret_cast<const float*>(w + s.k_scale);
  o.v_scale = reinterpret_cast<const float*>(w + s.v_scale);
  o.k = w + s.k8;
  o.vt = w + s.vt8;
  o.q = w + s.q8;
  o.q_scale = reinterpret_cast<const float*>(w + s.q_scale);
  o.keys_padded = s.keys_padded;
  return o;
}

bool flash_attention_fp8_supported(const FlashAttentionArgs& args) {
  return args.sliding_window == 0 && flash_attention_hopper_supported(args);
}

void flash_attention_fp8(const FlashAttentionArgs& args, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream) {
  SS_CHECK(flash_attention_fp8_supported(args));
  const Sections s = sections(args);
  SS_CHECK(workspace != nullptr && workspace_bytes >= s.total);
  SS_CHECK(reinterpret_cast<uintptr_t>(workspace) % 256 == 0);
  if (args.n_rows <= 0 || args.n_heads <= 0 || args.n_keys <= 0) return;
  auto* w = static_cast<unsigned char*>(workspace);
  auto* k_bits = reinterpret_cast<uint32_t*>(w + s.k_bits);
  auto* v_bits = reinterpret_cast<uint32_t*>(w + s.v_bits);
  auto* k_scale = reinterpret_cast<float*>(w + s.k_scale);
  auto* v_scale = reinterpret_cast<float*>(w + s.v_scale);
  const int32_t hd = args.head_dim, kvh = args.n_kv_heads;
  // k_bits and v_bits are adjacent: one memset clears both.
  SS_CUDA_CHECK(cudaMemsetAsync(k_bits, 0, s.k_scale - s.k_bits, stream));
  fp8_kv_amax_kernel<<<dim3((args.n_keys + kAmaxKeys - 1) / kAmaxKeys, kvh), kAmaxThreads, 0,
                       stream>>>(args, k_bits, v_bits);
  SS_CUDA_CHECK_LAUNCH();
  const size_t v_smem = size_t(kGroupKeys) * (hd + 1) * sizeof(float);
  fp8_kv_quantize_kernel<<<dim3(s.keys_padded / kGroupKeys, kvh), kQuantThreads, v_smem, stream>>>(
      args, k_bits, v_bits, s.keys_padded, k_scale, v_scale, w + s.k8, w + s.vt8);
  SS_CUDA_CHECK_LAUNCH();
  auto* q_scale = reinterpret_cast<float*>(w + s.q_scale);
  fp8_q_quantize_kernel<<<dim3(args.n_rows, (args.n_heads + 3) / 4), 128, 0, stream>>>(
      args, k_scale, w + s.q8, q_scale);
  SS_CUDA_CHECK_LAUNCH();

  KernelArgs k{};
  k.q_slot = args.q_slot;
  k.n_rows = args.n_rows;
  k.n_keys = args.n_keys;
  k.n_heads = args.n_heads;
  k.n_kv_heads = kvh;
  k.keys_padded = s.keys_padded;
  k.scale = args.scale;
  k.q8 = w + s.q8;
  k.q_scale = q_scale;
  k.k8 = w + s.k8;
  k.vt8 = w + s.vt8;
  k.v_scale = v_scale;
  k.out = args.out;
  k.out_stride = args.out_stride;
  if (hd == 128) {
    launch_attention<128>(k, args, stream);
  } else {
    launch_attention<64>(k, args, stream);
  }
}

}  // namespace specstack::cuda

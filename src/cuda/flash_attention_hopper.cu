// Hopper prefill attention for head_dims 128 and 64 (contract in flash_attention.h,
// dispatch in flash_attention_hopper.h; CPU twin CpuBackend::attention):
// FlashAttention-3 style, with warpgroup MMAs (wgmma, sm_90a) and warp
// specialisation.
//
// One CTA = 64 x kConsumers query rows of ONE head and 1 + kConsumers
// warpgroups (Tiling: head dim 128 2 consumers, 384 threads; head dim 64 3
// consumers, 512 threads):
//  * warpgroup 0, the producer, copies key tiles of 128 slots into shared
//    memory with cp.async (16 bytes, zero-filled past n_keys) through the
//    block table (two stages for K and two for V at head dim 128, three each at
//    64), working out each row's addresses once per tile, and signals each filled
//    stage on an mbarrier (cp.async.mbarrier.arrive.noinc). It keeps only a
//    few registers (setmaxnreg) so the consumers can have the rest.
//  * the consumer warpgroups own 64 query rows each. Per key tile:
//    S = Q K^T (wgmma m64n128k16, Q and K from smem), mask, online softmax in
//    fp32 on the accumulator registers, P rounded to bf16 in registers, O +=
//    P V (wgmma with P as the register A operand, V from smem as an MN-major
//    operand; m64n64k16 at head dim 64). The S GEMM of tile t is issued
//    together with the P V GEMM of tile t - 1, and the softmax of tile t runs
//    while that P V GEMM is still on the tensor cores (FA3's intra-warpgroup
//    overlap). With kPingPong (two consumers) they also take turns issuing
//    their GEMMs (named barriers), so one's softmax overlaps the other's GEMMs.
// Grid (n_heads, ceil(n_rows / kBlockM)): heads fastest (the heads of a GQA group
// read the same K/V from L2), query blocks from the last (most keys) to the
// first. The tile range is the FA2 kernel's: tiles past the CTA's last
// visible slot are never loaded, and with a sliding window a leading run of
// tiles that no row sees by position is skipped (found by reading the
// positions); every loaded tile is masked per element where a warp's rows
// need it (a causal-only mask compares each column with one bound a row and
// reads no key positions; rows past n_rows never make a tile masked).
//
// Shared-memory operands use the 128-byte swizzle of the wgmma canonical
// layouts. A tile of R rows x 128 bf16 is stored as two halves (dims 0..63,
// 64..127) of R rows x 128 bytes (at head dim 64 a tile is one such half); the 16-byte chunk c of
// row r sits at chunk c ^ (r % 8) of its row (swz_offset), every half starts 1024-byte aligned.
//  * Q (A) and K (B) are K-major: 8-row groups 1024 bytes apart (SBO); the
//    k-step kk of 16 dims starts at half kk / 4, byte (kk % 4) * 32.
//  * V (B of P V) is MN-major (transposed): its rows are keys (the K dim),
//    8-key groups 1024 bytes apart (SBO), the two 64-dim halves LBO apart;
//    k-step kk (keys 16 kk ..) starts at byte kk * 2048.
// Accumulator layout (m64nN f32, per warp w of the warpgroup, g = lane / 4,
// t = lane % 4): d[4 j + e] = (row 16 w + g, col 8 j + 2 t + e), d[4 j + 2 + e]
// = (row 16 w + g + 8, same col). The bf16 A fragment of k-step kk is d[8 kk ..
// 8 kk + 7] packed in pairs, so p[i] = bf16x2(s[2 i], s[2 i + 1]).
//
// Synchronisation: per stage, full_k / full_v mbarriers (128 producer
// arrivals, each once that thread's cp.asyncs have landed) and empty_k /
// empty_v (one arrival per consumer warp once the wgmmas reading the stage
// are complete, and for K once the stage's key positions were read). The
// n-th use of a stage waits for parity n & 1; a fresh barrier counts as having
// completed parity 1, so the producer's first wait on each empty barrier
// passes. cp.async writes are generic-proxy and wgmma reads async-proxy, so
// consumers fence.proxy.async after every full wait.
//
// Head dim 64 (the drafts: qwen2.5-0.5b, llama-3.2-1b) is the same kernel
// with one half per tile (Layout<64>): half the GEMM work per key tile, the
// same softmax work, so the ping-pong overlap of softmax with the other
// warpgroup's GEMMs matters twice as much there.
//
// Resource usage (nvcc 13.1, sm_90a, -Xptxas -v): 168 registers at launch
// (40 producer / 232 consumer after setmaxnreg), 0 spills at both head dims;
// 165952 B dynamic smem at head dim 128, 125536 B at 64, + 2 KB static; one
// CTA per SM (the register file, not smem, is the limit). In a build for plain sm_90 the kernel is
// empty and flash_attention_hopper_supported() is false.
#include <cuda_bf16.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/flash_attention_hopper.h"
#include "cuda/flash_attention_rows.cuh"
#include "cuda/flash_attention_softmax.cuh"
#include "cuda/sm90a.h"
#include "cuda/wgmma.cuh"

namespace specstack::cuda {

namespace {

using namespace flash_rows;  // physical_row, clamp_i32, first_window_tile

constexpr int kBlockN = 128;  // keys per tile

// Per head dim: the consumer warpgroups (64 query rows each) of one CTA and
// their register split. Head dim 128: two consumers that take turns issuing
// their GEMMs (ping-pong), 40 / 232 registers. Head dim 64 (FA3's choice):
// three consumers without ping-pong, 32 / 160 registers (its S, P and O fit:
// 64 + 32 + 32): a key tile carries half the GEMM work of head dim 128 but the
// same softmax work, and a third warpgroup gives the tensor cores more
// independent work than turn-taking between two (2 consumers: 374 / 388
// TFLOP/s at 16K / 32K, H100, 2026-11-25).
template <int kHeadDim>
struct Tiling {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dims of the wgmma kernel");
  static constexpr int kConsumers = kHeadDim == 64 ? 3 : 2;
  static constexpr bool kPingPong = kConsumers == 2;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per CTA
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kWarps = kThreads / 32;
  // Key tiles in flight (K and V each). A third stage lets the producer start
  // a V tile one tile earlier: +5-6% at head dim 64 (H100, 2026-11-26); at
  // head dim 128 a third V stage (the smem left fits no third K) gained nothing.
  static constexpr int kStages = kHeadDim == 64 ? 3 : 2;
  // Lanes of the producer that copy one key's consecutive 16-byte chunks. 8 at
  // head dim 128: an instruction is four whole 128-byte lines, four L2 requests
  // (lane pairs, one 32-byte sector each, made 16 requests an instruction and
  // saturated the L2's request rate: ncu "Mem Busy" 96%). 4 at head dim 64:
  // its tiles carry 2/3 the bytes per flop and its 16 warps leave fewer issue
  // slots, so fewer shuffles and row addresses per tile (4 lanes: 4 keys a
  // thread) beat whole lines (8 keys a thread) there; H100, 2026-11-26.
  static constexpr int kCopyLanes = kHeadDim == 64 ? 4 : 8;
  static constexpr int kProducerRegs = kConsumers == 2 ? 40 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 232 : 160;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "register file");
};

// Shared-memory layout for head dim kHeadDim (64 or 128), from a 1024-byte
// aligned base: Q [consumers][halves][64][128 B], K [stages][halves][128][128 B],
// V likewise, key positions [stages][128] i32, mbarriers full_k[stages],
// empty_k[stages], full_v[stages], empty_v[stages]. A half is 64 dims (128 bytes per row):
// head dim 128 has two, head dim 64 one, so its tiles are half size.
template <int kHeadDim>
struct Layout {
  static constexpr int kHalves = kHeadDim / 64;
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static constexpr uint32_t kHalfQ = 64 * 128;
  static constexpr uint32_t kHalfKV = kBlockN * 128;
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + Tiling<kHeadDim>::kConsumers * kHalves * kHalfQ;
  static constexpr int kStages = Tiling<kHeadDim>::kStages;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kHalves * kHalfKV;
  static constexpr uint32_t kPosOffset = kVOffset + kStages * kHalves * kHalfKV;
  static constexpr uint32_t kBarOffset = kPosOffset + kStages * kBlockN * 4;
  static constexpr uint32_t kSmemBytes = kBarOffset + 4 * kStages * 8 + 1024;  // + align slack
  static_assert(kSmemBytes + 2048 <= 227 * 1024, "shared memory of one CTA");
};

// Device code exists only in the sm_90a image (and is parsed by the host
// pass); a build for plain sm_90 gets an empty kernel it never launches.
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;
// Named barriers (0 is __syncthreads): Q ready / epilogue per consumer, and
// the ping-pong turns (ids past the three consumers').
constexpr int kBarConsumer = 1, kBarTurn = 4;

using namespace wg;  // cuda/wgmma.cuh

// Issues S = Q K^T for one key tile as one wgmma group (kHeadDim / 16
// k-steps of 16 dims): q_desc describes this warpgroup's Q tile, k_addr the K tile.
template <int kHeadDim>
__device__ __forceinline__ void gemm_qk(float (&s)[64], uint64_t q_desc, uint32_t k_addr) {
  using L = Layout<kHeadDim>;
  const uint64_t k_desc = make_desc(k_addr, 16, 1024);
  fence_regs(s);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    wgmma_ss(s, q_desc + (((kk >> 2) * L::kHalfQ + (kk & 3) * 32) >> 4),
             k_desc + (((kk >> 2) * L::kHalfKV + (kk & 3) * 32) >> 4), kk > 0);
  }
  wgmma_commit();
  fence_regs(s);
}

// Issues O += P V for one key tile as one wgmma group (8 k-steps of 16 keys):
// p holds P in the A-fragment layout, v_addr is the V tile (MN-major; at head
// dim 64 its one half spans the whole N extent, so the LBO is never used).
template <int kHeadDim>
__device__ __forceinline__ void gemm_pv(float (&o)[kHeadDim / 2], uint32_t (&p)[32],
                                        uint32_t v_addr) {
  const uint64_t v_desc = make_desc(v_addr, Layout<kHeadDim>::kHalfKV, 1024);
  fence_regs(o);
  fence_regs(p);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    wgmma_rs(o, p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3],
             v_desc + ((kk * 16 * 128) >> 4));
  }
  wgmma_commit();
  fence_regs(o);
  fence_regs(p);
}

// Max of a, min of b over the CTA; every thread gets the result. red [2][kWarps].
template <int kWarps>
__device__ __forceinline__ void block_reduce(int32_t& max_a, int32_t& min_b, int32_t* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  max_a = __reduce_max_sync(kFullMask, max_a);
  min_b = __reduce_min_sync(kFullMask, min_b);
  if (lane == 0) {
    red[warp] = max_a;
    red[kWarps + warp] = min_b;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    max_a = max(max_a, red[w]);
    min_b = min(min_b, red[kWarps + w]);
  }
  __syncthreads();  // red may be reused
}

#endif  // !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int kHeadDim>
__global__ void __launch_bounds__(Tiling<kHeadDim>::kThreads, 1)
    flash_attention_hopper_kernel(const __grid_constant__ FlashAttentionArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = Tiling<kHeadDim>;
  using L = Layout<kHeadDim>;
  constexpr int kConsumers = T::kConsumers, kBlockM = T::kBlockM, kWarps = T::kWarps;
  constexpr bool kPingPong = T::kPingPong;
  constexpr int kChunks = L::kChunks;
  constexpr uint32_t kHalfQ = L::kHalfQ, kHalfKV = L::kHalfKV;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  __shared__ int32_t s_red[2 * kWarps];
  __shared__ int32_t s_lim[kBlockM];     // per query row: last visible key slot (-1: none)
  __shared__ int32_t s_thresh[kBlockM];  // per query row: q_pos - sliding_window
  const uint32_t raw_base = smem_u32(smem_raw);
  const uint32_t base = (raw_base + 1023u) & ~1023u;  // the swizzle needs 1024-byte alignment
  unsigned char* const smem = smem_raw + (base - raw_base);
  const uint32_t bar = base + L::kBarOffset;
  constexpr int kStages = T::kStages;
  auto full_k = [&](int s) { return bar + 8 * s; };
  auto empty_k = [&](int s) { return bar + 8 * (kStages + s); };
  auto full_v = [&](int s) { return bar + 8 * (2 * kStages + s); };
  auto empty_v = [&](int s) { return bar + 8 * (3 * kStages + s); };
  auto k_tile = [&](int s) { return base + L::kKOffset + s * L::kHalves * kHalfKV; };
  auto v_tile = [&](int s) { return base + L::kVOffset + s * L::kHalves * kHalfKV; };
  const int32_t* const s_pos =
      reinterpret_cast<const int32_t*>(smem + L::kPosOffset);  // [stages][128]

  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int32_t head = blockIdx.x;
  const int32_t kv_head = head / (a.n_heads / a.n_kv_heads);
  const int32_t row0 = (gridDim.y - 1 - blockIdx.y) * kBlockM;  // heaviest blocks first
  const bool window = a.sliding_window > 0;

  // Full barriers: one cp.async arrival per producer thread; empty barriers:
  // one arrival per consumer warp.
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 128);
      mbar_init(empty_k(s), 4 * kConsumers);
      mbar_init(full_v(s), 128);
      mbar_init(empty_v(s), 4 * kConsumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Row metadata and the CTA's tile range (all threads; the barriers of
  // block_reduce also publish the mbarrier init and s_lim / s_thresh).
  int32_t max_lim = -1, min_thresh = INT_MAX;
  if (tid < kBlockM) {
    const int32_t r = row0 + tid;
    const bool ok = r < a.n_rows;
    const int32_t lim = ok ? min(a.q_slot[r], a.n_keys - 1) : -1;
    const int32_t thresh = ok ? clamp_i32(int64_t{a.q_pos[r]} - a.sliding_window) : INT_MAX;
    s_lim[tid] = lim;
    s_thresh[tid] = thresh;
    max_lim = lim;
    min_thresh = thresh;
  }
  block_reduce<kWarps>(max_lim, min_thresh, s_red);
  const int32_t kv_end = max_lim + 1;
  const int32_t t_end = (kv_end + kBlockN - 1) / kBlockN;
  const int32_t t_begin =
      window ? first_window_tile<T::kThreads, kBlockN, 8>(a, kv_end, min_thresh, s_red) : 0;
  const int32_t n_tiles = max(t_end - t_begin, 0);

  if (tid < 128) {
    // ---- Producer: warp pw copies keys 32 pw .. 32 pw + 31 of every tile;
    // kLanes consecutive lanes copy consecutive 16-byte chunks of one key, so
    // an instruction covers kRows keys: lane l copies chunks l % kLanes +
    // kLanes i of keys 32 pw + l / kLanes + kRows j. Lane l looks up the
    // physical row of key 32 pw + l and shuffles it to the lanes that copy
    // that key. A key's source address is worked out once, its chunks are
    // immediates from it, and every destination is one register XOR a
    // constant plus an immediate (per-chunk address arithmetic had made the
    // producer issue ~45% of the kernel's instructions; ncu, H100).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(T::kProducerRegs));
    constexpr int kLanes = T::kCopyLanes, kRows = 32 / kLanes;  // kLanes keys a thread
    static_assert((kLanes & (kLanes - 1)) == 0 && kLanes <= 8 && kChunks % kLanes == 0,
                  "the XOR form of the swizzle below needs a power of two <= 8");
    const int pw = tid / 32, lrow = lane / kLanes, lc = lane % kLanes;
    const int32_t kv_stride = a.n_kv_heads * kHeadDim;
    const __nv_bfloat16* const k_src = a.k_cache + kv_head * kHeadDim + lc * 8;
    const __nv_bfloat16* const v_src = a.v_cache + kv_head * kHeadDim + lc * 8;
    auto copy_rows = [&](const __nv_bfloat16* src, uint32_t tile, int32_t my_phys) {
      // Chunk lc + c of key r sits at slot ((lc + c) % 8) ^ (r % 8) of its
      // half; with lc < kLanes | c and lrow < kRows | kRows j that is
      // (lc ^ lrow % 8) ^ (c % 8) ^ (kRows j % 8): the first part is in base.
      const uint32_t base = (tile + (32 * pw + lrow) * 128) | ((lc ^ (lrow & 7)) << 4);
#pragma unroll
      for (int j = 0; j < kLanes; ++j) {  // key 32 pw + lrow + kRows j
        const int32_t phys = __shfl_sync(kFullMask, my_phys, lrow + kRows * j);
        const bool ok = phys >= 0;
        const __nv_bfloat16* const row_src = src + (ok ? int64_t{phys} * kv_stride : 0);
#pragma unroll
        for (int c = 0; c < kChunks; c += kLanes) {
          const uint32_t slot = ((c & 7) ^ ((kRows * j) & 7)) << 4;
          cp_async_16((base ^ slot) + kRows * j * 128 + (c >> 3) * kHalfKV, row_src + 8 * c,
                      ok ? 16 : 0);
        }
      }
    };
    // Tile i lives in stage i % kStages; the n-th use of a stage waits for
    // the consumers' release of use n - 1.
    auto load_v = [&](int32_t i, int32_t phys) {
      const int st = i % kStages;
      mbar_wait(empty_v(st), ((i / kStages) & 1) ^ 1);
      copy_rows(v_src, v_tile(st), phys);
      cp_async_arrive(full_v(st));
    };
    int32_t prev_phys = -1;
    for (int32_t i = 0; i < n_tiles; ++i) {
      const int st = i % kStages;
      const int32_t phys = physical_row(a, (t_begin + i) * kBlockN + tid);  // load in flight
      mbar_wait(empty_k(st), ((i / kStages) & 1) ^ 1);  // consumers done with tile i - kStages
      copy_rows(k_src, k_tile(st), phys);
      if (window) {
        cp_async_4(base + L::kPosOffset + (st * kBlockN + tid) * 4,
                   a.slot_positions + (phys >= 0 ? phys : 0), phys >= 0 ? 4 : 0);
      }
      cp_async_arrive(full_k(st));
      if (i > 0) load_v(i - 1, prev_phys);
      prev_phys = phys;
    }
    if (n_tiles > 0) load_v(n_tiles - 1, prev_phys);
    cp_async_wait_all();
  } else {
    // ---- Consumers: warpgroup cwg owns CTA rows 64 cwg .. + 63; this thread
    // holds rows ra = 64 cwg + 16 wi + g and ra + 8 of S and O.
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(T::kConsumerRegs));
    const int cwg = tid / 128 - 1;
    const int wtid = tid % 128, wi = wtid / 32, g = lane / 4, t4 = lane % 4;
    const int ra = 64 * cwg + 16 * wi + g;
    const int32_t lim0 = s_lim[ra], lim1 = s_lim[ra + 8];
    const int32_t thr0 = s_thresh[ra], thr1 = s_thresh[ra + 8];
    // Warp-uniform: a tile needs the causal mask when it ends past some row's
    // last slot, the window mask when some key position is <= some row's thresh.
    // Rows past n_rows (a partial last block) are never stored, so they take no
    // part: counted in (lim -1), they sent every tile of the CTA down the masked
    // path, ~1.8x the time a tile (per-CTA timeline, H100, session 44).
    const bool ok0 = row0 + ra < a.n_rows, ok1 = row0 + ra + 8 < a.n_rows;
    const int32_t w_min_lim =
        __reduce_min_sync(kFullMask, min(ok0 ? lim0 : INT_MAX, ok1 ? lim1 : INT_MAX));
    const int32_t w_max_thr =
        __reduce_max_sync(kFullMask, max(ok0 ? thr0 : INT_MIN, ok1 ? thr1 : INT_MIN));
    const uint32_t q_addr = base + L::kQOffset + cwg * L::kHalves * kHalfQ;

    // Q: 64 rows x kChunks chunks; zero rows past n_rows.
#pragma unroll
    for (int i = 0; i < kChunks / 2; ++i) {
      const int r = wtid / kChunks + (128 / kChunks) * i, c = wtid % kChunks;
      const int32_t row = row0 + 64 * cwg + r;
      const bool ok = row < a.n_rows;
      const __nv_bfloat16* src =
          ok ? a.q + row * a.q_stride + int64_t{head} * kHeadDim + c * 8 : a.q;
      cp_async_16(q_addr + swz_offset(r, c, kHalfQ), src, ok ? 16 : 0);
    }
    cp_async_wait_all();
    fence_proxy_async();
    bar_sync(kBarConsumer + cwg, 128);

    const uint64_t q_desc = make_desc(q_addr, 16, 1024);
    auto release = [&](uint32_t b) {
      __syncwarp();
      if (lane == 0) mbar_arrive(b);
    };

    float o[kHeadDim / 2], s[64];
    uint32_t p[32];
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f}, alpha[2] = {1.0f, 1.0f};
    const float scale_log2 = a.scale * kLog2e;

    // Mask the scores of tile t (stage st) and fold them into the online
    // softmax: row_max (raw scores), row_sum (this thread's partial sum), alpha
    // (rescale of O for the P V GEMM of this tile); s becomes p = exp2((s -
    // max) * scale log2 e).
    auto softmax = [&](int32_t t, int st) {
      const int32_t k0 = t * kBlockN;
      const int32_t* pos = s_pos + st * kBlockN;
      bool window_mask = false;
      if (window) {
        int32_t lo = INT_MAX;
#pragma unroll
        for (int u = 0; u < kBlockN / 32; ++u) lo = min(lo, pos[lane + 32 * u]);
        window_mask = __reduce_min_sync(kFullMask, lo) <= w_max_thr;
      }
      if (window_mask) {
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * j + 2 * t4 + e;
            const int32_t key = k0 + col, kp = pos[col];
            if (!(key <= lim0 && kp > thr0)) s[4 * j + e] = -INFINITY;
            if (!(key <= lim1 && kp > thr1)) s[4 * j + 2 + e] = -INFINITY;
          }
        }
      } else if (k0 + kBlockN - 1 > w_min_lim) {
        flash_softmax::causal_mask<kBlockN>(s, k0, lim0, lim1, t4);
      }
      flash_softmax::online_softmax<kBlockN>(s, row_max, row_sum, alpha, scale_log2, scale_log2);
    };
    auto rescale_o = [&] { flash_softmax::rescale<kHeadDim>(o, alpha); };
    auto pack_p = [&] {
#pragma unroll
      for (int i = 0; i < 32; ++i) p[i] = pack_bf16(s[2 * i], s[2 * i + 1]);
    };

    if (n_tiles > 0) {
      if (kPingPong && cwg == 0) bar_arrive(kBarTurn, 256);  // consumer 0 takes the first turn
      mbar_wait(full_k(0), 0);
      fence_proxy_async();
      gemm_qk<kHeadDim>(s, q_desc, k_tile(0));
      wgmma_wait<0>();
      fence_regs(s);
      softmax(t_begin, 0);
      release(empty_k(0));
      pack_p();
      for (int32_t i = 1; i < n_tiles; ++i) {
        const int st = i % kStages, pst = (i - 1) % kStages;
        mbar_wait(full_k(st), (i / kStages) & 1);
        fence_proxy_async();
        if (kPingPong) bar_sync(kBarTurn + cwg, 256);
        gemm_qk<kHeadDim>(s, q_desc, k_tile(st));
        rescale_o();  // by tile i - 1's alpha, before its P V
        mbar_wait(full_v(pst), ((i - 1) / kStages) & 1);
        fence_proxy_async();
        gemm_pv<kHeadDim>(o, p, v_tile(pst));
        if (kPingPong) bar_arrive(kBarTurn + (cwg ^ 1), 256);
        wgmma_wait<1>();  // S of tile i (P V of tile i - 1 may still run)
        fence_regs(s);
        softmax(t_begin + i, st);
        release(empty_k(st));
        wgmma_wait<0>();
        fence_regs(o);
        fence_regs(p);
        release(empty_v(pst));
        pack_p();
      }
      // Consumer 1's last turn hand-over is still pending on consumer 0's
      // barrier: take it, so no named barrier is left half-arrived at exit.
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

    // Epilogue: O / l in bf16, staged in this warpgroup's Q tile (every warp's
    // wgmmas are complete after the barrier), then 16-byte row stores.
    float inv[2];
    flash_softmax::inverse_row_sums(row_sum, inv);
    bar_sync(kBarConsumer + cwg, 128);
    fence_proxy_async();
    unsigned char* const s_out = smem + L::kQOffset + cwg * L::kHalves * kHalfQ;
    const int r = 16 * wi + g;
#pragma unroll
    for (int j = 0; j < kHeadDim / 8; ++j) {
      *reinterpret_cast<uint32_t*>(s_out + swz_offset(r, j, kHalfQ) + 4 * t4) =
          pack_bf16(o[4 * j] * inv[0], o[4 * j + 1] * inv[0]);
      *reinterpret_cast<uint32_t*>(s_out + swz_offset(r + 8, j, kHalfQ) + 4 * t4) =
          pack_bf16(o[4 * j + 2] * inv[1], o[4 * j + 3] * inv[1]);
    }
    bar_sync(kBarConsumer + cwg, 128);
#pragma unroll
    for (int i = 0; i < kChunks / 2; ++i) {
      const int rr = wtid / kChunks + (128 / kChunks) * i, c = wtid % kChunks;
      const int32_t row = row0 + 64 * cwg + rr;
      if (row < a.n_rows) {
        *reinterpret_cast<uint4*>(a.out + row * a.out_stride + int64_t{head} * kHeadDim + c * 8) =
            *reinterpret_cast<const uint4*>(s_out + swz_offset(rr, c, kHalfQ));
      }
    }
  }
#endif
}

template <int kHeadDim>
void launch(const FlashAttentionArgs& args, cudaStream_t stream) {
  auto* kernel = flash_attention_hopper_kernel<kHeadDim>;
  constexpr int kBlockM = Tiling<kHeadDim>::kBlockM;
  constexpr uint32_t kSmemBytes = Layout<kHeadDim>::kSmemBytes;
  SS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(args.n_heads),
                  static_cast<unsigned>((args.n_rows + kBlockM - 1) / kBlockM));
  kernel<<<grid, Tiling<kHeadDim>::kThreads, kSmemBytes, stream>>>(args);
  SS_CUDA_CHECK_LAUNCH();
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

}  // namespace

void set_flash_attention_hopper_enabled(bool enabled) {
  enabled_flag().store(enabled);
}

bool flash_attention_hopper_enabled() {
  return enabled_flag().load();
}

bool flash_attention_hopper_supported(const FlashAttentionArgs& args) {
  return flash_attention_hopper_enabled() && (args.head_dim == 64 || args.head_dim == 128) &&
         args.n_kv_heads > 0 && args.n_heads % args.n_kv_heads == 0 && args.block_size > 0 &&
         aligned16(args.q) && aligned16(args.k_cache) && aligned16(args.v_cache) &&
         aligned16(args.out) && args.q_stride % 8 == 0 && args.out_stride % 8 == 0 &&
         (int64_t{args.n_rows} + Tiling<64>::kBlockM - 1) / Tiling<64>::kBlockM <= 65535 &&
         (int64_t{args.n_rows} + Tiling<128>::kBlockM - 1) / Tiling<128>::kBlockM <= 65535 &&
         device_runs_sm90a();
}

void flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream) {
  SS_CHECK(flash_attention_hopper_supported(args));
  if (args.n_rows <= 0 || args.n_heads <= 0) return;
  if (args.head_dim == 128) {
    launch<128>(args, stream);
  } else {
    launch<64>(args, stream);
  }
}

}  // namespace specstack::cuda

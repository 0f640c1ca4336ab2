// FlashAttention-2 style prefill over the paged KV cache (contract in
// flash_attention.h; CPU twin CpuBackend::attention).
//
// One CTA = 4 warps = 128 query rows of ONE head; each warp owns 32 rows (two
// m16 tiles, so every K/V fragment read from smem feeds two MMAs). Grid
// (n_heads, ceil(n_rows / 128)): heads vary fastest so the heads of a GQA
// group read the same K/V tiles at about the same time (L2 hits), and the
// query blocks run from the last (most keys under the causal mask) to the
// first, so the long CTAs start early and the short ones fill the tail.
//
// Per CTA:
//  1. row metadata: lim = min(q_slot, n_keys - 1) (last visible slot) and
//     thresh = q_pos - sliding_window per row. Tiles past the CTA's largest
//     lim are never loaded (causal skip by slot). With a sliding window, a
//     leading run of whole tiles whose every key position is <= the CTA's
//     smallest thresh is skipped too; that run is found by reading the
//     positions (exact: nothing assumes positions ascend with slots), and
//     every kept tile is still masked per element. Per warp, a tile none of
//     its rows sees is skipped, and one that all of its rows fully see is not
//     masked.
//  2. Q tile -> smem (cp.async, zero rows past n_rows); its A fragments are
//     re-read with ldmatrix for every key tile.
//  3. key tiles of 64 slots, double-buffered in smem with cp.async (16-byte
//     copies, zero-filled past n_keys so no garbage reaches the MMAs); key j
//     lives at physical row block_table[j / block_size] * block_size + j %
//     block_size. The block-table lookups for tile t + 2 are issued while
//     tile t computes so their latency hides behind the MMAs.
//  4. S = Q K^T with mma.sync m16n8k16 (bf16 in, fp32 accumulate), mask,
//     online softmax in fp32 with exp2 (scale * log2 e folded into one FMA),
//     P rounded to bf16 in registers (the m16n8 accumulator layout is the A
//     operand layout of the next MMA), O += P V with V^T fragments from
//     ldmatrix.trans.
//  5. O / l -> bf16 staged through the warp's own rows of the Q tile in smem
//     and written with 16-byte stores; rows with no visible key write zeros.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .bf16), g = groupID = lane / 4,
// t = lane % 4:
//  A (16x16 row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//  B (16x8 col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//  C (16x8 f32):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
//
// Shared-memory rows are padded by 8 bf16 (16 bytes): the 8 row addresses of
// one 8x8 ldmatrix then fall in 8 distinct 16-byte bank groups.
//
// Resource usage (nvcc 13.0, sm_90, -Xptxas -v), 2 CTAs per SM:
//  head_dim 128: 255 registers, 0 bytes stack frame, 0 spill stores/loads,
//                104960 B dynamic + 5744 B static smem.
//  head_dim  64: 228 registers, 0 spills, 55808 B dynamic + 1648 B static smem.
// Measured on an H200 (32 query / 8 kv heads, causal prefill, block_size 16,
// shuffled blocks; FLOPs = 4 * head_dim * visible (query, key) pairs per head):
//  head_dim 128: 4K 299, 8K 320, 16K 329, 32K 329 TFLOP/s; sliding window
//                4096 at 32K 237; a 2K chunk at slot 30000 322.
//  head_dim  64: 16K 275 TFLOP/s.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/flash_attention.h"
#include "cuda/flash_attention_hopper.h"
#include "cuda/flash_attention_rows.cuh"
#include "cuda/ptx_primitives.cuh"

namespace specstack::cuda {
namespace {

using namespace flash_rows;  // physical_row, clamp_i32, first_window_tile
using namespace ptx;  // cp.async, ldmatrix, mma.sync, exp2, bf16 packing (cuda/ptx_primitives.cuh)

constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

// Compile-time shape of one instantiation: kWarps warps, each owning kMTiles
// m16 tiles of query rows; key tiles of kBlockN slots.
template <int kHeadDim_, int kWarps_, int kMTiles_, int kBlockN_>
struct Shape {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMTiles = kMTiles_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = 16 * kMTiles;
  static constexpr int kBlockM = kWarpRows * kWarps;         // query rows per CTA
  static constexpr int kLd = kHeadDim + 8;                   // padded smem row (bf16 elements)
  static constexpr int kChunksPerRow = kHeadDim / 8;         // 16-byte chunks in one row
  static constexpr int kRowStep = kThreads / kChunksPerRow;  // rows one pass of the CTA covers
  static constexpr int kKvRowsPerThread = kBlockN / kRowStep;
  static constexpr int kQRowsPerThread = kBlockM / kRowStep;
  static constexpr int kTileElems = kBlockN * kLd;
  // Two CTAs per SM (8 warps) is the occupancy the smem allows at head_dim
  // 128; saying so steers ptxas to a spill-free allocation within 255 registers.
  static constexpr int kMinBlocks = 2;
  // Softmax running max / sum in registers, or in smem where registers run out.
  static constexpr bool kStatsInRegs = kHeadDim * kMTiles <= 128;
  // smem: Q [kBlockM][kLd], K [2][kBlockN][kLd], V [2][kBlockN][kLd] bf16, key positions
  // [2][kBlockN] i32.
  static constexpr size_t kSmemBytes =
      sizeof(__nv_bfloat16) * (size_t(kBlockM) * kLd + 4 * size_t(kTileElems)) +
      sizeof(int32_t) * 2 * kBlockN;
  static_assert(kHeadDim % 16 == 0 && kThreads % kChunksPerRow == 0, "shape");
  static_assert(kBlockN % kRowStep == 0 && kBlockM % kRowStep == 0, "shape");
  static_assert(kBlockN % 32 == 0, "tile positions are read one warp-width at a time");
};

// Min/max over the CTA; every thread gets the result. red [3][kWarps] i32 smem.
template <int kWarps>
__device__ __forceinline__ void block_reduce(int32_t& min_a, int32_t& max_b, int32_t& min_c,
                                             int32_t* red) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  min_a = __reduce_min_sync(kFullMask, min_a);
  max_b = __reduce_max_sync(kFullMask, max_b);
  min_c = __reduce_min_sync(kFullMask, min_c);
  if (lane == 0) {
    red[warp] = min_a;
    red[kWarps + warp] = max_b;
    red[2 * kWarps + warp] = min_c;
  }
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    min_a = min(min_a, red[w]);
    max_b = max(max_b, red[kWarps + w]);
    min_c = min(min_c, red[2 * kWarps + w]);
  }
  __syncthreads();  // red may be reused
}

template <class S>
__global__ void __launch_bounds__(S::kThreads, S::kMinBlocks)
    flash_attention_kernel(const FlashAttentionArgs a) {
  constexpr int kHeadDim = S::kHeadDim, kMT = S::kMTiles, kBlockN = S::kBlockN;
  constexpr int kNT = kBlockN / 8;   // n8 tiles of scores per m-tile
  constexpr int kDT = kHeadDim / 8;  // n8 tiles of O per m-tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* s_q = reinterpret_cast<__nv_bfloat16*>(smem_raw);             // [kBlockM][kLd]
  __nv_bfloat16* s_k = s_q + S::kBlockM * S::kLd;                     // [2][kBlockN][kLd]
  __nv_bfloat16* s_v = s_k + 2 * S::kTileElems;                       // [2][kBlockN][kLd]
  auto* s_pos = reinterpret_cast<int32_t*>(s_v + 2 * S::kTileElems);  // [2][kBlockN]
  __shared__ int32_t s_red[3 * S::kWarps];
  __shared__ int32_t s_rows[2 * kBlockN];   // physical cache row of each key of each stage
  __shared__ int32_t s_lim[S::kBlockM];     // per query row: last visible key slot
  __shared__ int32_t s_thresh[S::kBlockM];  // per query row: q_pos - sliding_window
  __shared__ int32_t s_warp[S::kWarps][4];  // per warp: min lim, max lim, min thresh, max thresh
  constexpr int kStatThreads = S::kStatsInRegs ? 1 : S::kThreads;
  __shared__ float s_stats[2][2 * kMT][kStatThreads];  // see stat() below

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int group = lane / 4, tig = lane % 4;
  const int32_t head = blockIdx.x;
  const int32_t kv_head = head / (a.n_heads / a.n_kv_heads);
  const int32_t row0 = (gridDim.y - 1 - blockIdx.y) * S::kBlockM;  // heaviest blocks first
  const int warp_row0 = warp * S::kWarpRows;                       // within the CTA
  const bool window = a.sliding_window > 0;

  // 1. This thread's rows (m-tile mt, half i: warp_row0 + mt * 16 + group + 8 * i):
  // last visible slot and window threshold, kept in smem (s_lim, s_thresh)
  // for the masked tiles only, which saves registers. Rows past n_rows see
  // nothing (lim -1) and are never stored. Warp-wide: the smallest lim /
  // largest thresh decide whether a tile needs masking, the largest lim /
  // smallest thresh whether the warp sees the tile at all.
  int32_t w_min_lim = INT_MAX, w_max_lim = -1, w_min_thresh = INT_MAX, w_max_thresh = INT_MIN;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int cta_row = warp_row0 + mt * 16 + group + 8 * i;
      const int32_t r = row0 + cta_row;
      const bool ok = r < a.n_rows;
      const int32_t lim = ok ? min(a.q_slot[r], a.n_keys - 1) : -1;
      const int32_t thresh = ok ? clamp_i32(int64_t{a.q_pos[r]} - a.sliding_window) : INT_MAX;
      if (tig == 0) {  // read after the barriers of block_reduce
        s_lim[cta_row] = lim;
        s_thresh[cta_row] = thresh;
      }
      if (ok) {
        w_min_lim = min(w_min_lim, lim);
        w_max_lim = max(w_max_lim, lim);
        w_min_thresh = min(w_min_thresh, thresh);
        w_max_thresh = max(w_max_thresh, thresh);
      }
    }
  }
  w_min_lim = __reduce_min_sync(kFullMask, w_min_lim);
  w_max_lim = __reduce_max_sync(kFullMask, w_max_lim);
  w_min_thresh = __reduce_min_sync(kFullMask, w_min_thresh);
  w_max_thresh = __reduce_max_sync(kFullMask, w_max_thresh);
  // The key loop reads them back from smem (after block_reduce's barriers):
  // registers are the scarce resource there.
  if (lane == 0) {
    s_warp[warp][0] = w_min_lim;
    s_warp[warp][1] = w_max_lim;
    s_warp[warp][2] = w_min_thresh;
    s_warp[warp][3] = w_max_thresh;
  }
  // CTA-wide: kv_end = largest lim + 1 (tiles from there on are skipped: causal
  // skip by slot) and the smallest thresh (leading tiles outside the window).
  int32_t unused = INT_MAX, max_lim = w_max_lim, min_thresh = w_min_thresh;
  block_reduce<S::kWarps>(unused, max_lim, min_thresh, s_red);
  const int32_t kv_end = max_lim + 1;
  const int32_t t_end = (kv_end + kBlockN - 1) / kBlockN;
  const int32_t t_begin =
      window ? first_window_tile<S::kThreads, kBlockN, 16>(a, kv_end, min_thresh, s_red) : 0;

  // 2. Q tile -> smem (cp.async group 0), zero rows past n_rows.
  const int chunk_col =
      (tid % S::kChunksPerRow) * 8;  // this thread's column in every row it copies
  const int row_in_pass = tid / S::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < S::kQRowsPerThread; ++i) {
    const int r = row_in_pass + i * S::kRowStep;
    const bool ok = row0 + r < a.n_rows;
    const __nv_bfloat16* src =
        ok ? a.q + (row0 + r) * a.q_stride + int64_t{head} * kHeadDim + chunk_col : a.q;
    cp_async_16(s_q + r * S::kLd + chunk_col, src, ok ? 16 : 0);
  }
  cp_async_commit();

  // Key tile loader. s_rows[stage][r] is the physical cache row of key r of
  // the stage's tile (-1 past n_keys: zero fill); the loader reads it from smem
  // so no thread keeps per-row registers. Threads tid < kBlockN look up key tid.
  const int32_t kv_row_stride = a.n_kv_heads * kHeadDim;  // 32-bit: fewer live registers
  const int32_t kv_col = kv_head * kHeadDim + chunk_col;
  auto lookup_row = [&](int32_t tile) {
    return tid < kBlockN ? physical_row(a, tile * kBlockN + tid) : -1;
  };
  auto load_tile = [&](int stage) {
    __nv_bfloat16* k_dst = s_k + stage * S::kTileElems;
    __nv_bfloat16* v_dst = s_v + stage * S::kTileElems;
#pragma unroll
    for (int i = 0; i < S::kKvRowsPerThread; ++i) {
      const int r = row_in_pass + i * S::kRowStep;
      const int32_t phys = s_rows[stage * kBlockN + r];
      const bool ok = phys >= 0;
      const int64_t off = ok ? int64_t{phys} * kv_row_stride + kv_col : 0;  // 64-bit product
      cp_async_16(k_dst + r * S::kLd + chunk_col, a.k_cache + off, ok ? 16 : 0);
      cp_async_16(v_dst + r * S::kLd + chunk_col, a.v_cache + off, ok ? 16 : 0);
      if (window && chunk_col == 0) {
        cp_async_4(s_pos + stage * kBlockN + r, a.slot_positions + (ok ? phys : 0), ok ? 4 : 0);
      }
    }
  };
  if (tid < kBlockN) {
    s_rows[tid] = t_begin < t_end ? lookup_row(t_begin) : -1;
    s_rows[kBlockN + tid] = t_begin + 1 < t_end ? lookup_row(t_begin + 1) : -1;
  }
  __syncthreads();  // s_rows of the first two tiles
  if (t_begin < t_end) load_tile(0);
  cp_async_commit();

  // Q A-fragments of m-tile mt, head dims kk * 16 .. + 15 are re-read from
  // smem for every key tile (the registers hold the second m-tile's O
  // instead): ldmatrix x4 lanes give rows lane & 15, dims + 8 * (lane >= 16)
  // -> a0..a3; add mt * 16 rows and kk * 16 dims.
  constexpr uint32_t kRowBytes = S::kLd * sizeof(__nv_bfloat16);
  const uint32_t q_base = smem_u32(s_q + (warp_row0 + (lane & 15)) * S::kLd + (lane >> 4) * 8);

  float o[kMT][kDT][4];  // O accumulators: d-tile dt holds cols dt * 8 + 2 * tig (+1)
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
      o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
  }
  // Running softmax stats of this thread's rows: stat(0, mt * 2 + i) = raw max
  // score of the row, stat(1, ..) = this thread's partial sum of exp (the 4
  // lanes of a row are added at the end). At head_dim 128 the O and S
  // accumulators leave no registers for them, so they live in smem (each
  // thread only touches its own slots: no barriers needed).
  float st_reg[2][2 * kMT];
  auto stat = [&](int which, int r) -> float& {
    if constexpr (S::kStatsInRegs) {
      return st_reg[which][r];
    } else {
      return s_stats[which][r][tid];
    }
  };
#pragma unroll
  for (int r = 0; r < 2 * kMT; ++r) {
    stat(0, r) = -INFINITY;
    stat(1, r) = 0.0f;
  }
  const float scale_log2 = a.scale * kLog2e;

  for (int32_t t = t_begin; t < t_end; ++t) {
    const int stage = (t - t_begin) & 1;
    // Prefetch tile t + 1 into the other stage (free since the barrier at the
    // end of the previous iteration). The rows of tile t + 2 are looked up now
    // into a register (the load stays in flight during this tile's math) and
    // stored to smem at the end. The first pass also waits for Q (group 0).
    int32_t rows_t2 = -1;
    if (t + 1 < t_end) {
      load_tile(stage ^ 1);
      if (t + 2 < t_end) rows_t2 = lookup_row(t + 2);
    }
    cp_async_commit();
    cp_async_wait<1>();  // tile t landed
    __syncthreads();

    const int32_t k0 = t * kBlockN;
    const int32_t* pos = s_pos + stage * kBlockN;
    // Warp-uniform tile tests: skip a tile none of the warp's rows sees, mask
    // only tiles that cross a row's last slot or a row's window start.
    bool skip = k0 > s_warp[warp][1];
    bool window_mask = false;
    if (window) {
      int32_t lo = INT_MAX, hi = INT_MIN;
#pragma unroll
      for (int u = 0; u < kBlockN / 32; ++u) {
        lo = min(lo, pos[lane + 32 * u]);
        hi = max(hi, pos[lane + 32 * u]);
      }
      lo = __reduce_min_sync(kFullMask, lo);
      hi = __reduce_max_sync(kFullMask, hi);
      skip = skip || hi <= s_warp[warp][2];
      window_mask = lo <= s_warp[warp][3];
    }
    if (!skip) {
      const uint32_t k_tile = smem_u32(s_k + stage * S::kTileElems);
      const uint32_t v_tile = smem_u32(s_v + stage * S::kTileElems);

      // S = Q K^T: s[mt][nt] is keys nt * 8 .. + 7 of the tile.
      float s[kMT][kNT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
      }
      {
        // ldmatrix x4 lanes: keys np * 16 + (lane & 7) + 8 * (lane >= 16), dims + 8 * bit 3 of
        // lane -> r0, r1 = b0, b1 of n-tile 2 np; r2, r3 = b0, b1 of n-tile 2 np + 1.
        const uint32_t k_base =
            k_tile + ((lane & 7) + ((lane >> 4) << 3)) * kRowBytes + ((lane >> 3) & 1) * 16;
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk) {
          uint32_t qa[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
            ldmatrix_x4(qa[mt], q_base + mt * 16 * kRowBytes + kk * 32);
#pragma unroll
          for (int np = 0; np < kNT / 2; ++np) {
            uint32_t b[4];
            ldmatrix_x4(b, k_base + np * 16 * kRowBytes + kk * 32);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma_bf16(s[mt][2 * np], qa[mt], b[0], b[1]);
              mma_bf16(s[mt][2 * np + 1], qa[mt], b[2], b[3]);
            }
          }
        }
      }

      // Mask: key j = k0 + col is visible to a row iff j <= lim and (no window
      // or key_pos > thresh).
      if (k0 + kBlockN - 1 > s_warp[warp][0] || window_mask) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
          for (int i = 0; i < 2; ++i) {
            const int cta_row = warp_row0 + mt * 16 + group + 8 * i;
            const int32_t lim = s_lim[cta_row], thresh = s_thresh[cta_row];
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int col = nt * 8 + 2 * tig + e;
                const bool visible = k0 + col <= lim && (!window_mask || pos[col] > thresh);
                if (!visible) s[mt][nt][2 * i + e] = -INFINITY;
              }
            }
          }
        }
      }

      // Online softmax (fp32): new max, rescale the running sum and O,
      // p = exp2((s - max) * scale log2 e).
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float old_max = stat(0, 2 * mt + i);
          float mx = old_max;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt)
            mx = fmaxf(mx, fmaxf(s[mt][nt][2 * i], s[mt][nt][2 * i + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
          // Nothing visible yet: subtract 0 so exp2(-inf - 0) = 0 instead of NaN.
          const float base = mx == -INFINITY ? 0.0f : mx * scale_log2;
          const float alpha = fast_exp2(old_max * scale_log2 - base);  // old max -inf -> 0
          stat(0, 2 * mt + i) = mx;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kNT; ++nt) {
            s[mt][nt][2 * i] = fast_exp2(fmaf(s[mt][nt][2 * i], scale_log2, -base));
            s[mt][nt][2 * i + 1] = fast_exp2(fmaf(s[mt][nt][2 * i + 1], scale_log2, -base));
            sum += s[mt][nt][2 * i] + s[mt][nt][2 * i + 1];
          }
          stat(1, 2 * mt + i) = stat(1, 2 * mt + i) * alpha + sum;
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            o[mt][dt][2 * i] *= alpha;
            o[mt][dt][2 * i + 1] *= alpha;
          }
        }
      }

      // O += P V: P's A fragment for keys kk * 16 .. + 15 is S tiles 2 kk and 2 kk + 1.
      {
        // ldmatrix x4 trans lanes: keys kk * 16 + (lane & 7) + 8 * bit 3 of lane, dims dp * 16 +
        // 8 * (lane >= 16) -> r0, r1 = b0, b1 of d-tile 2 dp; r2, r3 = b0, b1 of d-tile 2 dp + 1.
        const uint32_t v_base =
            v_tile + ((lane & 7) + ((lane >> 3) & 1) * 8) * kRowBytes + (lane >> 4) * 16;
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
          uint32_t p[kMT][4];
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            p[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            p[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            p[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            p[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
          }
#pragma unroll
          for (int dp = 0; dp < kHeadDim / 16; ++dp) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_base + kk * 16 * kRowBytes + dp * 32);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              mma_bf16(o[mt][2 * dp], p[mt], b[0], b[1]);
              mma_bf16(o[mt][2 * dp + 1], p[mt], b[2], b[3]);
            }
          }
        }
      }
    }
    // s_rows[stage] was last read when tile t was issued (before the barrier
    // above), so tile t + 2, which uses the same stage, may take it.
    if (tid < kBlockN) s_rows[stage * kBlockN + tid] = rows_t2;
    __syncthreads();  // every warp is done with this stage before it is refilled
  }
  // Nothing in flight past here, for any thread (with no key tile at all, the
  // Q copies of other threads may still be landing in the rows reused below).
  cp_async_wait<0>();
  __syncthreads();

  // 5. Normalise and write: the warp's own rows of s_q (only this warp read
  // them, before the barrier above) stage the bf16 tile for 16-byte stores.
  __nv_bfloat16* s_out = s_q + warp_row0 * S::kLd;  // [kWarpRows][kLd]
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float l = stat(1, 2 * mt + i);
      l += __shfl_xor_sync(kFullMask, l, 1);
      l += __shfl_xor_sync(kFullMask, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: zeros
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<uint32_t*>(s_out + (mt * 16 + group + 8 * i) * S::kLd + dt * 8 +
                                     2 * tig) =
            pack_bf16(o[mt][dt][2 * i] * inv, o[mt][dt][2 * i + 1] * inv);
      }
    }
  }
  __syncwarp();  // lanes read back what other lanes wrote
  constexpr int kChunks = S::kWarpRows * S::kChunksPerRow;  // 16-byte chunks of the warp's rows
  static_assert(kChunks % 32 == 0, "whole warp passes");
#pragma unroll
  for (int c0 = 0; c0 < kChunks; c0 += 32) {
    const int c = c0 + lane;
    const int r = c / S::kChunksPerRow, col = (c % S::kChunksPerRow) * 8;
    const int32_t row = row0 + warp_row0 + r;
    if (row < a.n_rows) {
      *reinterpret_cast<uint4*>(a.out + row * a.out_stride + int64_t{head} * kHeadDim + col) =
          *reinterpret_cast<const uint4*>(s_out + r * S::kLd + col);
    }
  }
}

template <class S>
void launch(const FlashAttentionArgs& args, cudaStream_t stream) {
  auto* kernel = flash_attention_kernel<S>;
  // Over 48 KiB of dynamic smem needs the opt-in (cheap; idempotent).
  SS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(S::kSmemBytes)));
  const dim3 grid(static_cast<unsigned>(args.n_heads),
                  static_cast<unsigned>((args.n_rows + S::kBlockM - 1) / S::kBlockM));
  kernel<<<grid, S::kThreads, S::kSmemBytes, stream>>>(args);
  SS_CUDA_CHECK_LAUNCH();
}

// 4 warps x 32 rows, 64-key tiles (FA2's shape): tried against 4 x 16 and
// 8 x 16 rows and 32 / 128-key tiles, this was fastest at both head dims.
using Shape128 = Shape<128, 4, 2, 64>;
using Shape64 = Shape<64, 4, 2, 64>;
static_assert(Shape128::kBlockM == Shape64::kBlockM, "one grid.y bound for both");

}  // namespace

bool flash_attention_supported(int32_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void flash_attention(const FlashAttentionArgs& args, cudaStream_t stream) {
  SS_CHECK(flash_attention_supported(args.head_dim));
  SS_CHECK_GT(args.n_kv_heads, 0);
  SS_CHECK_EQ(args.n_heads % args.n_kv_heads, 0);
  SS_CHECK_GT(args.block_size, 0);
  // 16-byte copies of Q, K, V and out rows.
  SS_CHECK(aligned16(args.q) && aligned16(args.k_cache) && aligned16(args.v_cache) &&
           aligned16(args.out));
  SS_CHECK(args.q_stride % 8 == 0 && args.out_stride % 8 == 0);
  if (args.n_rows <= 0 || args.n_heads <= 0) return;
  // Hopper (wgmma) kernel where the build and the device allow it.
  if (flash_attention_hopper_supported(args)) {
    flash_attention_hopper(args, stream);
    return;
  }
  // Query blocks run on grid.y.
  SS_CHECK_LE((args.n_rows + Shape128::kBlockM - 1) / Shape128::kBlockM, 65535);
  if (args.head_dim == 128) {
    launch<Shape128>(args, stream);
  } else {
    launch<Shape64>(args, stream);
  }
}

}  // namespace specstack::cuda

// The run kernel of verify_attention.h. One CTA per (run, kv head,
// partition), 256 threads (8 warps: 2 CTAs fit an SM, so more warps per CTA hide more latency),
// dynamic shared memory (~105 KB at head_dim 128):
//  1. the run's Q (rows x group heads = up to 64 query vectors, zero-padded
//     to whole 16-row MMA tiles) is staged in shared memory once;
//  2. the partition's slots are resolved once (keys the window hides from
//     the run's FIRST row are hidden from all its rows and are not loaded),
//     then it is walked in sub-tiles of kSub keys, K and V rows loaded once
//     into shared memory through registers (the next sub-tile's loads are in
//     flight during this one's math);
//  3. S = Q K^T on the tensor cores, scaled in fp32 and masked per (row, key)
//     (causal by the row's own slot, window by the row's position);
//  4. online softmax per query vector (running max / sum, fp32), P rounded
//     to bf16 for the PV product as flash attention does;
//  (MMA operands come from shared memory through ldmatrix, V transposed.)
//  5. O = O * rescale + P V on the tensor cores, O kept in fp32 shared memory.
// The result is written like paged_attention_kernel's: bf16 out with one
// partition, else (acc, max, sum) partials that combine_kernel merges.
#include <cuda_bf16.h>

#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/pdl.h"
#include "cuda/verify_attention.h"

namespace specstack::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSub = 64;  // keys per sub-tile
constexpr int kMaxQ = kRunMaxQueries;
constexpr float kLog2e = 1.4426950408889634f;
constexpr unsigned kFullMask = 0xffffffffu;

static_assert(kPartitionSize % kSub == 0, "partitions are whole sub-tiles");

// Shared memory layout for one head dim (element strides padded against
// bank conflicts; every array 16-byte aligned).
template <int kHeadDim>
struct Smem {
  static constexpr int kKvStride = kHeadDim + 8;  // bf16 per row of Q, K, V
  static constexpr int kSStride = kSub + 4;       // f32 per row of S / P
  static constexpr int kOStride = kHeadDim + 4;   // f32 per row of O
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t{kMaxQ} * kKvStride * 2;
  static constexpr size_t kV = kK + size_t{kSub} * kKvStride * 2;
  static constexpr size_t kS = kV + size_t{kSub} * kKvStride * 2;
  static constexpr size_t kO = kS + size_t{kMaxQ} * kSStride * 4;
  static constexpr size_t kFlat = kO + size_t{kMaxQ} * kOStride * 4;  // int32 [kPartitionSize]
  static constexpr size_t kKpos = kFlat + kPartitionSize * 4;         // int32 [kPartitionSize]
  static constexpr size_t kMax = kKpos + kPartitionSize * 4;          // f32 [kMaxQ]
  static constexpr size_t kSum = kMax + kMaxQ * 4;                    // f32 [kMaxQ]
  static constexpr size_t kScale = kSum + kMaxQ * 4;                  // f32 [kMaxQ]
  static constexpr size_t kRowSlot = kScale + kMaxQ * 4;              // int32 [kMaxQ]
  static constexpr size_t kRowPos = kRowSlot + kMaxQ * 4;             // int32 [kMaxQ]
  static constexpr size_t kBytes = kRowPos + kMaxQ * 4;
};

__device__ __forceinline__ int64_t workspace_entry(int32_t t, int32_t head, int32_t part,
                                                   int32_t n_heads, int32_t n_parts,
                                                   int32_t head_dim) {
  return ((static_cast<int64_t>(t) * n_heads + head) * n_parts + part) * (head_dim + 2);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 bf16 matrices (the A fragment of one 16x16 tile).
__device__ __forceinline__ void ldmatrix_x4(const bf16* p, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr(p)));
}

// Two 8x8 matrices (a B fragment whose rows are the n index).
__device__ __forceinline__ void ldmatrix_x2(const bf16* p, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr(p)));
}

// Two 8x8 matrices transposed (a B fragment from rows of the k index).
__device__ __forceinline__ void ldmatrix_x2_trans(const bf16* p, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr(p)));
}

// c += A (16x16, row) * B (16x8, col), bf16 in, f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, off));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(kFullMask, x, off);
  return x;
}

// grid (n_tokens, n_kv_heads, n_parts): only CTAs of run heads
// (token_run[t] > 0) work; the others return at once.
template <int kHeadDim>
__global__ void __launch_bounds__(kThreads)
    run_attention_kernel(const PagedAttentionArgs a, const int32_t n_parts) {
  pdl_begin();
  using L = Smem<kHeadDim>;
  constexpr int kKv = L::kKvStride, kS = L::kSStride, kO = L::kOStride;
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per K/V row
  extern __shared__ __align__(16) unsigned char smem[];
  auto* s_q = reinterpret_cast<bf16*>(smem + L::kQ);   // [kMaxQ][kKv]
  auto* s_k = reinterpret_cast<bf16*>(smem + L::kK);   // [kSub][kKv]
  auto* s_v = reinterpret_cast<bf16*>(smem + L::kV);   // [kSub][kKv]
  auto* s_s = reinterpret_cast<float*>(smem + L::kS);  // [kMaxQ][kS] scores, then P
  auto* s_o = reinterpret_cast<float*>(smem + L::kO);  // [kMaxQ][kO] unnormalised out
  auto* s_flat = reinterpret_cast<int32_t*>(smem + L::kFlat);
  auto* s_kpos = reinterpret_cast<int32_t*>(smem + L::kKpos);
  auto* s_max = reinterpret_cast<float*>(smem + L::kMax);
  auto* s_sum = reinterpret_cast<float*>(smem + L::kSum);
  auto* s_rescale = reinterpret_cast<float*>(smem + L::kScale);
  auto* s_rslot = reinterpret_cast<int32_t*>(smem + L::kRowSlot);
  auto* s_rpos = reinterpret_cast<int32_t*>(smem + L::kRowPos);

  const int32_t t0 = blockIdx.x;
  const int32_t kvh = blockIdx.y;
  const int32_t part = blockIdx.z;
  const int32_t rows = a.token_run[t0];
  if (rows <= 0) return;  // not a run head (uniform)
  const int32_t g = a.n_heads / a.n_kv_heads;
  const int32_t n_q = rows * g;  // query vector m = row (m / g), head (m % g) of the group
  const int32_t m_tiles = (n_q + 15) / 16;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int gr = lane >> 2;  // MMA fragment row / column group
  const int tq = lane & 3;

  const int32_t last_slot = a.token_slot[t0 + rows - 1];
  const int32_t start = part * a.partition_size;
  const int32_t n_keys = min(a.partition_size, last_slot + 1 - start);
  if (n_keys <= 0) {
    if (n_parts == 1) {  // only when no row has a slot (padding): zeros
      for (int i = tid; i < n_q * kHeadDim; i += kThreads) {
        const int32_t m = i / kHeadDim;
        const int64_t head = static_cast<int64_t>(kvh) * g + m % g;
        a.out[(t0 + m / g) * a.out_stride + head * kHeadDim + i % kHeadDim] =
            __float2bfloat16(0.0f);
      }
    }
    return;
  }

  // 1. Rows, Q, running state.
  for (int r = tid; r < rows; r += kThreads) {
    s_rslot[r] = a.token_slot[t0 + r];
    s_rpos[r] = a.token_pos[t0 + r];
  }
  for (int i = tid; i < m_tiles * 16 * kChunks; i += kThreads) {
    const int m = i / kChunks;
    const int c = (i % kChunks) * 8;
    uint4 v{0, 0, 0, 0};
    if (m < n_q) {
      const bf16* src =
          a.q + (t0 + m / g) * a.q_stride + (static_cast<int64_t>(kvh) * g + m % g) * kHeadDim + c;
      v = __ldg(reinterpret_cast<const uint4*>(src));
    }
    *reinterpret_cast<uint4*>(s_q + m * kKv + c) = v;
  }
  for (int i = tid; i < m_tiles * 16 * kO; i += kThreads) s_o[i] = 0.0f;
  for (int m = tid; m < kMaxQ; m += kThreads) {
    s_max[m] = -INFINITY;
    s_sum[m] = 0.0f;
  }

  const int32_t* table =
      a.block_tables + static_cast<int64_t>(a.token_seq[t0]) * a.max_blocks_per_seq;
  // A key the window hides from the run's first row is hidden from all rows
  // (positions grow along the run): it is not loaded at all.
  const int64_t hidden_for_all = static_cast<int64_t>(a.token_pos[t0]) - a.sliding_window;
  const int64_t kv_row = static_cast<int64_t>(a.n_kv_heads) * kHeadDim;
  const bf16* k_head = a.k_cache + static_cast<int64_t>(kvh) * kHeadDim;
  const bf16* v_head = a.v_cache + static_cast<int64_t>(kvh) * kHeadDim;
  const float q_scale = a.scale * kLog2e;

  // 2. The partition's slots, once (rounded up to whole sub-tiles; -1 =
  // not loaded: past the keys or hidden from every row).
  const int32_t n_padded = (n_keys + kSub - 1) / kSub * kSub;
  for (int i = tid; i < n_padded; i += kThreads) {
    int32_t flat = -1;
    int32_t kpos = 0;
    if (i < n_keys) {
      const int32_t j = start + i;
      const int32_t f = table[j / a.block_size] * a.block_size + j % a.block_size;
      kpos = a.slot_positions[f];
      if (a.sliding_window <= 0 || kpos > hidden_for_all) flat = f;
    }
    s_flat[i] = flat;
    s_kpos[i] = kpos;
  }
  __syncthreads();

  // K and V rows of a sub-tile go through registers: the next sub-tile's
  // loads are issued before this one's math, so their latency overlaps it.
  constexpr int kLoads = kSub * kChunks / kThreads;  // per thread, per matrix
  static_assert(kSub * kChunks % kThreads == 0, "whole loads");
  uint4 kr[kLoads], vr[kLoads];
  auto load_sub = [&](int32_t sub) {
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = tid + u * kThreads;
      const int32_t flat = s_flat[sub + i / kChunks];
      const int c = (i % kChunks) * 8;
      kr[u] = flat >= 0 ? __ldg(reinterpret_cast<const uint4*>(k_head + flat * kv_row + c))
                        : uint4{0, 0, 0, 0};
      vr[u] = flat >= 0 ? __ldg(reinterpret_cast<const uint4*>(v_head + flat * kv_row + c))
                        : uint4{0, 0, 0, 0};
    }
  };
  load_sub(0);

  for (int32_t sub = 0; sub < n_keys; sub += kSub) {
    const int32_t n_sub = min(kSub, n_keys - sub);
    __syncthreads();  // the previous sub-tile's readers are done
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int i = tid + u * kThreads;
      const int off = (i / kChunks) * kKv + (i % kChunks) * 8;
      *reinterpret_cast<uint4*>(s_k + off) = kr[u];
      *reinterpret_cast<uint4*>(s_v + off) = vr[u];
    }
    __syncthreads();
    if (sub + kSub < n_keys) load_sub(sub + kSub);

    // 3. S = Q K^T, masked.
    for (int tile = warp; tile < m_tiles * (kSub / 8); tile += kWarps) {
      const int mi = tile / (kSub / 8);
      const int ni = tile % (kSub / 8);
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // ldmatrix row addresses: A rows mi * 16 + lane % 16, column half
      // lane / 16; B (K rows = keys) rows ni * 8 + lane % 8, half (lane / 8) % 2.
      const bf16* qa = s_q + (mi * 16 + lane % 16) * kKv + (lane / 16) * 8;
      const bf16* kb = s_k + (ni * 8 + lane % 8) * kKv + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int k0 = 0; k0 < kHeadDim; k0 += 16) {
        uint32_t a0, a1, a2, a3, b0, b1;
        ldmatrix_x4(qa + k0, a0, a1, a2, a3);
        ldmatrix_x2(kb + k0, b0, b1);
        mma_bf16(c, a0, a1, a2, a3, b0, b1);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = mi * 16 + gr + (e >= 2 ? 8 : 0);
        const int key = ni * 8 + tq * 2 + (e & 1);
        float s = 0.0f;  // padding query vectors: finite, never written out
        if (m < n_q) {
          const int r = m / g;
          const bool visible =
              key < n_sub && s_flat[sub + key] >= 0 && start + sub + key <= s_rslot[r] &&
              (a.sliding_window <= 0 ||
               s_kpos[sub + key] > static_cast<int64_t>(s_rpos[r]) - a.sliding_window);
          s = visible ? c[e] * q_scale : -INFINITY;
        }
        s_s[m * kS + key] = s;
      }
    }
    __syncthreads();

    // 4. Online softmax, one warp per query vector. P is written as bf16
    // over the start of the row's own scores (every lane has read its
    // scores before the shuffles, and writes only after them).
    static_assert(kSub == 64, "two scores per lane");
    for (int m = warp; m < n_q; m += kWarps) {
      const float s0 = s_s[m * kS + lane];
      const float s1 = s_s[m * kS + lane + 32];
      const float mx = warp_max(fmaxf(s0, s1));
      const float m_old = s_max[m];
      const float m_new = fmaxf(m_old, mx);
      const float p0 = m_new == -INFINITY ? 0.0f : exp2f(s0 - m_new);
      const float p1 = m_new == -INFINITY ? 0.0f : exp2f(s1 - m_new);
      const float l = warp_sum(p0 + p1);
      bf16* p_row = reinterpret_cast<bf16*>(s_s + m * kS);
      p_row[lane] = __float2bfloat16(p0);
      p_row[lane + 32] = __float2bfloat16(p1);
      if (lane == 0) {
        const float rescale = m_old == -INFINITY ? 0.0f : exp2f(m_old - m_new);
        s_rescale[m] = rescale;
        s_sum[m] = s_sum[m] * rescale + l;
        s_max[m] = m_new;
      }
    }
    __syncthreads();

    // 5. O = O * rescale + P V.
    for (int tile = warp; tile < m_tiles * kChunks; tile += kWarps) {
      const int mi = tile / kChunks;
      const int ni = tile % kChunks;
      const int m_lo = mi * 16 + gr;
      const int m_hi = m_lo + 8;
      const int n = ni * 8 + tq * 2;
      float* o_lo = s_o + m_lo * kO + n;
      float* o_hi = s_o + m_hi * kO + n;
      const float f_lo = m_lo < n_q ? s_rescale[m_lo] : 0.0f;
      const float f_hi = m_hi < n_q ? s_rescale[m_hi] : 0.0f;
      float c[4] = {o_lo[0] * f_lo, o_lo[1] * f_lo, o_hi[0] * f_hi, o_hi[1] * f_hi};
      // P (bf16, row stride 2 * kS) as A; V rows (keys) k0 + lane % 16 at
      // dims ni * 8, transposed by ldmatrix into the col-major B fragment.
      const bf16* pa =
          reinterpret_cast<const bf16*>(s_s) + (mi * 16 + lane % 16) * (2 * kS) + (lane / 16) * 8;
      const bf16* vb = s_v + (lane % 16) * kKv + ni * 8;
#pragma unroll
      for (int k0 = 0; k0 < kSub; k0 += 16) {
        uint32_t a0, a1, a2, a3, b0, b1;
        ldmatrix_x4(pa + k0, a0, a1, a2, a3);
        ldmatrix_x2_trans(vb + k0 * kKv, b0, b1);
        mma_bf16(c, a0, a1, a2, a3, b0, b1);
      }
      o_lo[0] = c[0];
      o_lo[1] = c[1];
      o_hi[0] = c[2];
      o_hi[1] = c[3];
    }
  }
  __syncthreads();

  // Write out (one partition) or the partials.
  for (int i = tid; i < n_q * kHeadDim; i += kThreads) {
    const int32_t m = i / kHeadDim;
    const int32_t d = i % kHeadDim;
    const int32_t t = t0 + m / g;
    const int32_t head = kvh * g + m % g;
    if (n_parts == 1) {
      const float l = s_sum[m];
      a.out[t * a.out_stride + static_cast<int64_t>(head) * kHeadDim + d] =
          __float2bfloat16(l > 0.0f ? s_o[m * kO + d] / l : 0.0f);
    } else {
      float* w = a.workspace + workspace_entry(t, head, part, a.n_heads, n_parts, kHeadDim);
      w[d] = s_o[m * kO + d];
      if (d == 0) {
        w[kHeadDim] = s_max[m];
        w[kHeadDim + 1] = s_sum[m];
      }
    }
  }
}

template <int kHeadDim>
void launch(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  constexpr size_t kBytes = Smem<kHeadDim>::kBytes;
  // Opting in to more than 48 KB of dynamic shared memory is per kernel and
  // device-wide; setting it again is cheap and keeps no state here.
  SS_CUDA_CHECK(cudaFuncSetAttribute(run_attention_kernel<kHeadDim>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kBytes)));
  const dim3 grid(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads),
                  static_cast<unsigned>(n_parts));
  launch_pdl(run_attention_kernel<kHeadDim>, grid, kThreads, kBytes, stream, a.pdl, a, n_parts);
}

}  // namespace

bool run_attention_supported(int32_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void launch_run_attention(const PagedAttentionArgs& a, int32_t n_parts, cudaStream_t stream) {
  SS_CHECK(a.token_run != nullptr);
  SS_CHECK_EQ(a.partition_size % kSub, 0);
  // Q rows are read with 16-byte loads.
  SS_CHECK(reinterpret_cast<uintptr_t>(a.q) % 16 == 0 && a.q_stride % 8 == 0);
  switch (a.head_dim) {
    case 64:
      launch<64>(a, n_parts, stream);
      break;
    case 128:
      launch<128>(a, n_parts, stream);
      break;
    default:
      SS_CHECK_MSG(false, "run attention: head_dim must be 64 or 128");
  }
}

}  // namespace specstack::cuda

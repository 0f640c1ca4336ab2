// What the two fused SwiGLU GEMM kernels share (swiglu_gemm.cu: bf16,
// fp8_swiglu_gemm.cu: e4m3; contract in swiglu_gemm.h): the persistent tile
// walk, TMA box loads onto an mbarrier, the epilogue's bf16 rounding (its
// SwiGLU arithmetic: swiglu_math.cuh), and the host-side tensor maps.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "base/check.h"
#include "cuda/cuda_check.h"
#include "cuda/swiglu_math.cuh"
#include "cuda/wgmma.cuh"

namespace specstack::cuda::swiglu_common {

constexpr int kGroupM = 16;  // row tiles walked together (L2 reuse)

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// A box of the 2-D tensor map at (k0, row0) into smem, arriving on bar with
// its bytes (rows past the tensor's end are zeros).
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int32_t k0,
                                         int32_t row0, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(bar)
      : "memory");
}

__device__ __forceinline__ float bf16_round(float v) {
  return __bfloat162float(__float2bfloat16(v));
}

// Tile t's (row tile, column tile): groups of kGroupM row tiles, row tiles
// fastest inside a group, so the CTAs running together share weight tiles.
__device__ __forceinline__ void tile_coords(int32_t t, int32_t m_tiles, int32_t n_tiles,
                                            int32_t& mt, int32_t& nt) {
  const int32_t group_tiles = kGroupM * n_tiles;
  const int32_t g = t / group_tiles;
  const int32_t first = g * kGroupM;
  const int32_t rows = min(kGroupM, m_tiles - first);
  const int32_t r = t - g * group_tiles;
  mt = first + r % rows;
  nt = r / rows;
}
#endif

// The TMA pipeline both kernels run: kStages stages in dynamic shared memory,
// stage s = an A tile [kBlockM rows][128 bytes of k] then a B tile of kBlockN
// gate rows and the kBlockN up rows of the same columns (128 bytes each; up
// rows start `width` rows after gate rows in the weight), each part 1024-byte
// aligned; full[s] (the producer's expect_tx arrival + the bytes) and
// empty[s] (lane 0 of each of the 8 consumer warps) mbarriers. kBlockK: the
// elements in 128 bytes.
template <int kStages, int kBlockM, int kBlockN, int kBlockK>
struct Pipeline {
  static constexpr uint32_t kATile = kBlockM * 128;                // bytes
  static constexpr uint32_t kBHalf = kBlockN * 128;                // bytes of the gate (or up) rows
  static constexpr uint32_t kStage = kATile + 2 * kBHalf;          // bytes
  static constexpr uint32_t kSmemBytes = kStages * kStage + 1024;  // + the 1024-byte alignment

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  uint32_t base;   // 1024-byte aligned start of stage 0
  uint64_t* bars;  // [2 kStages] in shared memory: full[s], then empty[s]

  __device__ Pipeline(unsigned char* smem, uint64_t* barriers)
      : base((wg::smem_u32(smem) + 1023u) & ~1023u), bars(barriers) {}
  __device__ uint32_t a_tile(int s) const {
    return base + s * kStage;
  }
  __device__ uint32_t b_tile(int s) const {
    return base + s * kStage + kATile;
  }
  __device__ uint32_t full(int s) const {
    return wg::smem_u32(&bars[s]);
  }
  __device__ uint32_t empty(int s) const {
    return wg::smem_u32(&bars[kStages + s]);
  }

  // Thread 0 initialises the barriers; every thread of the CTA calls it.
  __device__ void init() const {
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        wg::mbar_init(full(s), 1);
        wg::mbar_init(empty(s), 8);
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
  }

  // The producer's one thread: every stage of the CTA's tiles (t from
  // blockIdx.x, gridDim.x apart), each stage once its consumers released it.
  __device__ void produce(const CUtensorMap* map_x, const CUtensorMap* map_w, int32_t m_tiles,
                          int32_t n_tiles, int32_t k_blocks, int32_t width) const {
    int s = 0;
    uint32_t phase = 0;
    for (int32_t t = blockIdx.x; t < m_tiles * n_tiles; t += gridDim.x) {
      int32_t mt, nt;
      tile_coords(t, m_tiles, n_tiles, mt, nt);
      for (int32_t kb = 0; kb < k_blocks; ++kb) {
        wg::mbar_wait(empty(s), phase ^ 1);
        mbar_expect_tx(full(s), kStage);
        const int32_t k0 = kb * kBlockK;
        tma_load(a_tile(s), map_x, k0, mt * kBlockM, full(s));
        tma_load(b_tile(s), map_w, k0, nt * kBlockN, full(s));
        tma_load(b_tile(s) + kBHalf, map_w, k0, width + nt * kBlockN, full(s));
        if (++s == kStages) s = 0, phase ^= 1;
      }
    }
  }
#endif
};

inline PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    SS_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                   cudaEnableDefault, &found));
    SS_CHECK_MSG(found == cudaDriverEntryPointSuccess && f != nullptr,
                 "the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A [rows, cols] matrix of `type` (rows ld_bytes apart) read in boxes of
// box_rows rows x 128 bytes, in the 128-byte swizzle.
inline CUtensorMap tensor_map(const void* data, CUtensorMapDataType type, int64_t elem_bytes,
                              int64_t rows, int64_t cols, int64_t ld_bytes, uint32_t box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / elem_bytes), box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode_fn()(&map, type, 2, const_cast<void*>(data), dims, strides, box, element_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SS_CHECK_MSG(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed");
  return map;
}

inline int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    SS_CUDA_CHECK(cudaGetDevice(&dev));
    SS_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}

}  // namespace specstack::cuda::swiglu_common

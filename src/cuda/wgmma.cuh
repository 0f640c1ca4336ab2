// Hopper (sm_90a) building blocks shared by the warpgroup-MMA kernels
// (flash_attention_hopper.cu: prefill attention; verify_attention_wgmma.cuh:
// decode / verify runs over the paged KV cache): 128-byte-swizzled shared
// memory tiles and their wgmma descriptors, mbarriers, proxy fences, named
// barriers and the wgmma instructions themselves (cp.async and the other
// arch-neutral helpers: cuda/ptx_primitives.cuh).
//
// Shared-memory operand layout (the wgmma canonical 128-byte swizzle): a tile
// of R rows x 64 bf16 (128 bytes a row) is a "half"; wider rows are several
// halves half_bytes apart. The 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) of its row (swz_offset); every half starts 1024-byte aligned.
//  * K-major operands (Q, K: rows are M or N, the K dim along the row):
//    8-row groups 1024 bytes apart (SBO); k-step kk of 16 dims starts at half
//    kk / 4, byte (kk % 4) * 32.
//  * MN-major operands (V of P V: rows are the K dim): 8-row groups 1024
//    bytes apart (SBO), the 64-column halves LBO apart; k-step kk (rows
//    16 kk ..) starts at byte kk * 2048.
// Accumulator layout (m64nN f32, per warp w of the warpgroup, g = lane / 4,
// t = lane % 4): d[4 j + e] = (row 16 w + g, col 8 j + 2 t + e), d[4 j + 2 + e]
// = (row 16 w + g + 8, same col). A register A fragment of k-step kk has the
// same rows: a0 = (row g, k 2t ..), a1 = (row g + 8, k 2t ..), a2 / a3 the
// same at k + 8 (mma.m16n8k16's A layout per warp), so the bf16 A fragment of
// k-step kk of an accumulator is d[8 kk .. 8 kk + 7] packed in pairs.
//
// Only the sm_90a image (and the host pass, which parses it) sees these
// definitions: code that uses them is guarded by the same condition.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/ptx_primitives.cuh"

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace specstack::cuda::wg {

using namespace ptx;  // smem_u32, cp.async, fast_exp2, pack_bf16 (cuda/ptx_primitives.cuh)

// Byte offset of the 16-byte chunk `chunk` (dims 8 chunk ..) of row r in a
// swizzled tile whose halves are half_bytes apart.
__device__ __forceinline__ uint32_t swz_offset(int r, int chunk, uint32_t half_bytes) {
  return (chunk >> 3) * half_bytes + r * 128 + (((chunk & 7) ^ (r & 7)) << 4);
}

// wgmma shared-memory descriptor, 128-byte swizzle: start address, leading
// and stride byte offsets in 16-byte units, layout type 1 in bits 62..63.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(lbo >> 4) << 16) | (uint64_t(sbo >> 4) << 32) |
         (uint64_t(1) << 62);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Waits until the phase of the given parity has completed (a fresh barrier
// counts the phase before the first as completed with parity 1).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives on bar once every cp.async this thread issued so far has landed
// (no pending-count increment: the barrier's count includes this arrival).
__device__ __forceinline__ void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Orders this thread's generic-proxy view of smem (cp.async or st.shared
// data) before its next async-proxy accesses (wgmma operand reads).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int n>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(n) : "memory");
}

// Pins registers at this point of the instruction stream, so the compiler
// neither reads a wgmma accumulator before the wait that completes it nor
// reuses an operand register while a wgmma may still read it.
template <int n>
__device__ __forceinline__ void fence_regs(float (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

template <int n>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[n]) {
#pragma unroll
  for (int i = 0; i < n; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define SS_WGMMA_D64                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define SS_WGMMA_D32                                                                            \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define SS_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define SS_D16(i) SS_D4(i), SS_D4(i + 4), SS_D4(i + 8), SS_D4(i + 12)
#define SS_D32 SS_D16(0), SS_D16(16)
#define SS_D64 SS_D16(0), SS_D16(16), SS_D16(32), SS_D16(48)

// d (64x128 f32) = or += A (64x16, smem, K-major) * B (16x128, smem, K-major);
// accumulate == 0 overwrites d (the first k-step of S = Q K^T).
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                         int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SS_WGMMA_D64
      ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : SS_D64
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64x128 f32) = or += A (64 x 32 e4m3, smem, K-major) * B (32 x 128, smem,
// K-major): fp8_swiglu_gemm's gate / up tiles. e4m3 takes no transpose
// immediates.
__device__ __forceinline__ void wgmma_m64n128_e4m3(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                   int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " SS_WGMMA_D64
      ", %64, %65, p, 1, 1;\n}\n"
      : SS_D64
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

// d (64xN f32) += A (64 x 32 e4m3, registers: a0 = row g, k 4t..4t+3; a1 = row
// g + 8; a2 / a3 the same at k + 16, byte i of a register is k + i) * B (32 x
// N e4m3, smem, K-major): O += P V^T-stored V in flash_attention_fp8.cu.
__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " SS_WGMMA_D64
      ", {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : SS_D64
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

__device__ __forceinline__ void wgmma_rs_e4m3(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                              uint32_t a3, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 " SS_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
      : SS_D32
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

// d (64x128 f32) += A (64x16 bf16, registers) * B (16x128, smem, MN-major): O += P V.
__device__ __forceinline__ void wgmma_rs(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " SS_WGMMA_D64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : SS_D64
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

// d (64x64 f32) += A (64x16 bf16, registers) * B (16x64, smem, MN-major): O += P V
// at head dim 64.
__device__ __forceinline__ void wgmma_rs(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint64_t desc_b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SS_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : SS_D32
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(1));
}

// d (64x64 f32) = or += A (64x16 bf16, registers) * B (16x64, smem, K-major):
// S = Q K^T of a 64-key tile with Q in registers; accumulate == 0 overwrites d.
__device__ __forceinline__ void wgmma_rs_kmajor(float (&d)[32], uint32_t a0, uint32_t a1,
                                                uint32_t a2, uint32_t a3, uint64_t desc_b,
                                                int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " SS_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : SS_D32
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(accumulate));
}

#undef SS_D64
#undef SS_D32
#undef SS_D16
#undef SS_D4
#undef SS_WGMMA_D32
#undef SS_WGMMA_D64

}  // namespace specstack::cuda::wg

#endif  // !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

// Q8_0 weights laid out in panels of 16 rows (DType::kQ8_0P), for decode and
// small batches on AVX-512 VNNI and AVX-VNNI.
//
// Why: a Q8_0 row as GGUF stores it meets an activation row one weight row
// at a time, so the decode kernels spend ~7 vector ops per row and block
// (quant_kernels_avx512.cpp) and, at 4-16 activation rows, are bound by
// those ops rather than by memory (quant_matmul_bench: 2.3 GB/s at 4 rows
// against 10 at one). In a panel, each 64 bytes hold the same 4 values of
// 16 rows, so one activation dword broadcast meets 16 weight rows in one
// vpdpbusd: 8 of them give 16 rows' block sums, and a panel's 8 weight
// vectors serve every activation row of a small batch from registers. The
// layout is what llama.cpp's AMX build repacks Q8_0 into at load
// (tinygemm_kernel_vnni), and a panel is one sequential stream.
//
// Layout of a [out, in] matrix (out a multiple of 16, in of 32): panel p
// (rows 16p .. 16p + 15), block b (values 32b .. 32b + 31) at byte
// (p * in / 32 + b) * 544:
//   [0, 32)                the 16 rows' f16 scales d, in row order;
//   [32 + 64k, 96 + 64k)   for k = 0..7, values 4k .. 4k + 3 of rows 0..15
//                          (4 bytes a row, row order), each byte q + 128.
// q + 128 because vpdpbusd multiplies unsigned by signed bytes: the
// activations stay signed, and each activation block's -128 Σa starts the
// sums, so Σ (q + 128) a - 128 Σa = Σ q a exactly.
//
// Floats: every output is quant_blocksum.h's blocksum_dot_ref of the row's
// Q8_0 blocks and the activation row's Q8_0 blocks (+ bias), bit for bit, on
// every isa and row count: the block-sum prefill GEMM computes the same
// floats, so decode and prefill agree exactly on panels (they did not on
// Q8_0 rows, where decode sums 4 values at a time).
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

inline constexpr int64_t kPanelRows = 16;
inline constexpr int64_t kPanelBlockBytes = 544;  // 16 x 2 scale bytes + 16 x 32 q

// Activation rows up to which matmul() runs panels on the panel kernels;
// longer chunks take the block-sum GEMM on rows unpacked per cache tile.
// Measured (quant_matmul_bench, dev VM, 2 threads, 8192 x 2048 and 2048 x
// 8192): panels 1.6x the block-sum GEMM at 16 rows, 1.06-1.3x at 64, 0.65x
// at 512 rows of 8192 (each panel meets every activation row, which no
// longer stay in cache: a loop order for long chunks is not done).
inline constexpr int64_t kPanelMaxRows = 64;

// SPECSTACK_QUANT_PANELS=0 keeps Q8_0 matrices as stored (for A/B runs).
inline constexpr const char* kQuantPanelsEnv = "SPECSTACK_QUANT_PANELS";

// Whether the panel kernels run on `isa` here (AVX-512 VNNI or AVX-VNNI,
// when the CPU and the build have it). Other isas run the scalar reference
// loop (AVX2's maddubs would saturate the (q + 128) a pairs).
bool quant_panels_available(Isa isa);

// Whether a CPU model lays its Q8_0 matrices out in panels at load: the
// panel kernels are available on quant_best_isa() and SPECSTACK_QUANT_PANELS
// is not "0" (read once per process).
bool quant_panels_enabled();

// Whether `w` can be laid out in panels: a Q8_0 matrix [out, in], out a
// multiple of 16 (every published shape; others stay rows).
bool q8_0_panels_fit(const Tensor& w);

// The same matrix as kQ8_0P, in a new buffer. w [out, in] Q8_0 (q8_0_panels_fit).
Tensor repack_q8_0_panels(ThreadPool& pool, const Tensor& w);

// Rows [row_begin, row_end) of a kQ8_0P matrix as Q8_0 blocks (in / 32 per
// row, rows one after another): out [row_end - row_begin, in / 32] BlockQ8_0.
void panel_rows_to_q8_0(const Tensor& w, int64_t row_begin, int64_t row_end, void* out);

// y = x · wᵀ (+ bias): x [n, in] f32, w [out, in] kQ8_0P, bias [out] f32 or
// null, y [n, out] f32. The activation rows are quantized to Q8_0 blocks
// once; parallel over panels, each panel passing over the activation rows
// 4 at a time. y[i, o] = blocksum_dot_ref(row o, x row i) + (bias[o] or
// +0.0f) bit for bit; the VNNI kernels where available, else the scalar loop.
void matmul_q8_0_panels(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                        Tensor& y, Isa isa);

}  // namespace specstack::cpu

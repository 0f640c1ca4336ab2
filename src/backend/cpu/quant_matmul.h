// y = x · wᵀ (+ bias) for a block-quantized weight (DType kQ8_0 ... kQ6_K,
// the GGUF blocks as stored): the rows of x are quantized to int8 blocks
// once per call, then every output feature is an integer dot product per
// block (quant_kernels.h). Parallel over output features on the backend's
// ThreadPool, in tiles of weight rows that stay in cache while every x row
// passes over them: decode and short chunks (matmul() uses it up to
// matmul_quant_max_rows() x rows; longer chunks take quant_gemm.h's int8
// tiles or dequantized tiles + sgemm, cpu_matmul.h).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

// How the activation rows reach the kernels: kPrepared, in the kernel's own
// form where it has one (QuantKernel::prepared: Q4_0 on AVX2 / AVX-512 VNNI),
// made once per call; kBlocks, always as the quantized blocks (the
// kernels before session 25, kept for quant_matmul_bench's A/B and the
// tests). The same floats either way. kAuto (the default): prepared wherever
// the kernel has that form: on AVX2 (1.30-1.63x the blocks at one activation
// row, session 25) and on AVX-512 VNNI (1.5x at one row, 1.9x at four on one
// core of the AVX-512 VNNI dev VM, session 26; docs/benchmarks.md).
enum class QuantActForm : uint8_t { kAuto, kPrepared, kBlocks };

// x [n, in] f32, w [out, in] quantized, bias [out] f32 or null, y [n, out] f32.
// isa: Isa::kScalar, kAvx2, kAvxVnni or kAvx512Vnni (checked against CPUID).
// rows_per_pass: weight rows per pass over an activation row, 4 (the
// four-row kernels, QuantKernel::dot4) or 1 (the one-row kernel only, kept
// for quant_matmul_bench's A/B); the results are the same bit for bit.
// acts_together: with more than one x row, types with QuantKernel::dot_acts
// (the K-quants) run each weight row against up to four x rows at once;
// false runs one x row per pass as the other types do (quant_matmul_bench's
// A/B). The same floats either way.
void matmul_quant(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa, int rows_per_pass = 4, QuantActForm form = QuantActForm::kAuto,
                  bool acts_together = true);

// SPECSTACK_QUANT_TOGETHER=0 runs K-quant matmuls of several x rows one x
// row per pass (matmul_quant's acts_together = false), for A/B runs.
inline constexpr const char* kQuantTogetherEnv = "SPECSTACK_QUANT_TOGETHER";

// Whether matmul() passes acts_together: SPECSTACK_QUANT_TOGETHER is not
// "0" (read once per process).
bool quant_acts_together();

// The checks every quantized matmul makes: CPU tensors, x [n, in], w [out,
// in], y [n, out], bias [out] or null.
void check_quant_matmul_args(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y);

// act [n, in / k.act_block_elements] activation blocks of x [n, in]'s rows,
// quantized in parallel: once per matmul, for every output feature.
std::unique_ptr<uint8_t[]> quantize_activation_rows(ThreadPool& pool, const QuantKernel& k,
                                                    const Tensor& x);

// out[(r - row_begin) * cols + k] = w[r, k] as f32 for r in [row_begin, row_end),
// exactly as ggml dequantizes. w [rows, cols] quantized.
void dequantize_rows(const Tensor& w, int64_t row_begin, int64_t row_end, float* out);

}  // namespace specstack::cpu

// The bf16 GEMM algorithm per shape for decode and verify row counts
// (Gemm::gemm, cuda/gemm.h): cublasGemmEx's default choice, or one of
// cuBLASLt's heuristic answers where that is measurably faster.
//
// Why: at the row counts of a speculative verify step (batch x (k + 1), e.g.
// 64 x 5 = 320) cublasGemmEx's default is far from the best algorithm
// cuBLASLt offers for some matrices (H100, bench/gemm_algo_bench, qwen2.5-7b:
// o_proj at 320 rows 26.0 -> 14.2 us, down_proj 93.7 -> 78.7, qkv 27.5 ->
// 23.5; at 64 rows qkv 13.1 -> 11.0), while at prefill row counts it is within
// a few percent of the best either way (and sometimes the best), which is why
// rows past max_rows are left to it untimed.
//
// How: the first call of a (matrix shape, strides, output type, power-of-two
// row bucket) outside a graph capture times the default and up to
// `candidates` heuristic answers on the call's own operands (5 interleaved
// rounds, median per candidate; y is overwritten by the real call after) and
// keeps the fastest, an answer other than the default only when it is 3%
// faster. Later calls in the bucket reuse the choice (checked once per exact
// shape with cublasLtMatmulAlgoCheck, else the default). Inside a
// capture nothing is timed: a decode graph's eager warm-up run (cuda_graphs.cpp)
// has tuned its shapes before. The choice is made per process by timing, so
// two processes may pick different algorithms for a shape (results then
// differ in f32 summation order); within a process a shape's algorithm is
// fixed.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "cuda/lt_linear_layout.h"

namespace specstack::cuda {

class Bf16GemmTuner {
 public:
  // workspace: device memory cuBLASLt may use (stream-ordered with the
  // caller's other cuBLAS work on the same stream).
  // candidates 0 turns the tuning off: every call takes the default.
  Bf16GemmTuner(cudaStream_t stream, cublasHandle_t blas, void* workspace, size_t workspace_bytes,
                int64_t max_rows = 1024, int candidates = 16);
  ~Bf16GemmTuner();
  Bf16GemmTuner(const Bf16GemmTuner&) = delete;
  Bf16GemmTuner& operator=(const Bf16GemmTuner&) = delete;

  // y[n, out] (ldy) = x[n, in] (ldx) · w[out, in]ᵀ, bf16 operands, f32
  // accumulation, y bf16 or f32: cublasGemmEx's default algorithm, or the
  // shape's tuned cuBLASLt answer for n in [2, max_rows].
  void gemm(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out, int64_t in, void* y,
            cudaDataType_t y_type, int64_t ldy);

  // Shapes tuned so far and how many of them chose a cuBLASLt answer.
  int tuned() const { return static_cast<int>(choice_.size()); }
  int tuned_to_lt() const;

 private:
  // One exact shape's cuBLASLt descriptors, and whether its bucket's
  // cuBLASLt algorithm runs it (cublasLtMatmulAlgoCheck, asked once: a
  // bucket's choice never changes).
  struct Plan : LtLinearLayout {
    enum class Check { kUnknown, kUsable, kUnusable } lt_check = Check::kUnknown;
  };
  // A bucket's choice: the default (use_lt false) or a cuBLASLt algorithm.
  struct Choice {
    bool use_lt = false;
    cublasLtMatmulAlgo_t algo{};
  };
  using ShapeKey =
      std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;  // n out in ldx ldy type

  Plan& plan(const ShapeKey& key);  // the output type is the key's
  Choice tune(Plan& p, const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
              int64_t in, void* y, cudaDataType_t y_type, int64_t ldy);
  cublasStatus_t run_default(const void* x, int64_t ldx, const void* w, int64_t n, int64_t out,
                             int64_t in, void* y, cudaDataType_t y_type, int64_t ldy);
  cublasStatus_t run_lt(Plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w,
                        void* y);

  cudaStream_t stream_;
  cublasHandle_t blas_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_;
  size_t workspace_bytes_;
  int64_t max_rows_;
  int candidates_;
  std::map<ShapeKey, Plan> plans_;     // per exact shape
  std::map<ShapeKey, Choice> choice_;  // per bucket (n = the bucket's upper bound)
};

}  // namespace specstack::cuda

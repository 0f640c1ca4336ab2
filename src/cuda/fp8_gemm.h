// FP8 (e4m3 x e4m3 -> bf16) GEMMs for prefill through cuBLASLt on Hopper:
// y[n, out] = (x8[n, in] · w8[out, in]ᵀ) ⊙ (x_scale[n] ⊗ w_scale[out]), f32
// accumulation. The per-token activation scales and per-channel weight scales
// go either into cuBLASLt's "outer vector" scale modes (cuBLAS 12.9+ on
// sm_90; the heuristic finds them only once the scale pointers are set), or,
// with defer_scales, the GEMM runs unscaled into bf16 (e4m3 products of at
// most 448², summed over `in`, stay far inside bf16's range) and the caller
// folds the scales into its next pass. Measured on the H100 (docs/
// benchmarks.md "FP8 weights"): the scaled kernels are 2-6% slower than the
// unscaled ones at 8192 rows and up to 1.55x slower at 16 rows, so the in-GEMM
// scales pay only where the caller would otherwise run a whole extra pass over
// a large output. Plans (algorithm per shape and mode) are cached, so a graph
// capture never queries the heuristic twice.
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/fp8_quantize.h"
#include "cuda/lt_linear_layout.h"

namespace specstack::cuda {

struct Fp8GemmOptions {
  // cuBLASLt's FP8 "fast accumulation": Hopper's FP8 tensor-core
  // accumulators keep fewer bits than f32; without it the kernels promote the
  // partial sums to f32 registers every few k-steps (slower, more exact).
  bool fast_accum = false;
  // Algorithm choice: up to this many of cuBLASLt's heuristic answers are
  // timed once on the first call of a shape with at least autotune_min_rows
  // rows (outside graph capture) and the fastest kept; the choice is reused
  // (after cublasLtMatmulAlgoCheck) for every other row count in the same
  // power-of-two bucket, so a server's varying prefill chunks time each
  // (matrix, bucket) once. 1 (the default): the heuristic's first answer,
  // untimed. Off because on the H100 at qwen2.5-7b's shapes and 8192 rows no
  // other answer was 3% faster in steady state (fp8_bench, docs/benchmarks.md
  // "session 24"), while tuning costs ~0.1-0.2 s of GPU time per bucket.
  int autotune_candidates = 1;
  int64_t autotune_min_rows = 512;
};

// What the last autotune did (fp8_bench prints it).
struct Fp8Tuning {
  int candidates = 0;      // heuristic answers timed
  int chosen = -1;         // index of the fastest (0: the heuristic's first)
  float first_us = 0.0f;   // the first answer's time per call
  float chosen_us = 0.0f;  // the chosen one's
};

class Fp8Gemm {
 public:
  // workspace: device memory cuBLASLt may use (stream-ordered with the
  // caller's other cuBLAS work on the same stream).
  Fp8Gemm(cudaStream_t stream, void* workspace, size_t workspace_bytes,
          const Fp8GemmOptions& options = {});
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // x8 [n, in] e4m3 dense, x_scale [n]; w8 [out, in] e4m3, w_scale [out];
  // y [n, ldy] bf16. `in` a multiple of 16 (cuBLASLt's FP8 alignment).
  // defer_scales: an unscaled GEMM, the scales left to the caller (returns
  // false); otherwise scaled in cuBLASLt where it can, else by
  // scale_outer_bf16 here (returns true).
  bool matmul(const fp8* x8, const float* x_scale, const fp8* w8, const float* w_scale, int64_t n,
              int64_t out, int64_t in, __nv_bfloat16* y, int64_t ldy, bool defer_scales = false);
  // The same product with an f32 output y [n, ldy] (an FP8 LM head's logits),
  // always scaled: in cuBLASLt where it can, else by scale_outer_f32.
  void matmul_f32(const fp8* x8, const float* x_scale, const fp8* w8, const float* w_scale,
                  int64_t n, int64_t out, int64_t in, float* y, int64_t ldy);

  // Whether the last matmul applied the scales inside cuBLASLt (for tests and the docs).
  bool last_used_outer_vector_scaling() const { return last_outer_; }
  const Fp8Tuning& last_tuning() const { return tuning_; }
  // What cuBLASLt answered when a plan asked for outer-vector scaling.
  const std::string& outer_vector_status() const { return outer_status_; }

 private:
  struct Plan : LtLinearLayout {
    cublasLtMatmulAlgo_t algo{};
    bool outer = false;  // scales inside cuBLASLt
    // The heuristic's other answers, until the first call times them (autotune).
    std::vector<cublasLtMatmulAlgo_t> candidates;
  };
  // (out, in, ldy, outer, ceil(log2 n), output type): a tuned algorithm for that bucket.
  using TuneKey = std::tuple<int64_t, int64_t, int64_t, bool, int, int>;
  void autotune(Plan& p, const TuneKey& key, const fp8* x8, const fp8* w8, void* y);
  Plan& plan(int64_t n, int64_t out, int64_t in, int64_t ldy, bool want_outer,
             cudaDataType_t y_type);
  bool make_plan(Plan& p, int64_t n, int64_t out, int64_t in, int64_t ldy, bool outer,
                 cudaDataType_t y_type);
  // cublasLtMatmul with the plan for (n, out, in, ldy, want_outer, y_type);
  // returns whether it applied the scales.
  bool run(const fp8* x8, const float* x_scale, const fp8* w8, const float* w_scale, int64_t n,
           int64_t out, int64_t in, void* y, int64_t ldy, bool want_outer, cudaDataType_t y_type);
  static void destroy(Plan& p);

  cudaStream_t stream_ = nullptr;
  Fp8GemmOptions options_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // (n, out, in, ldy, outer wanted, output type)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int>, Plan> plans_;
  std::map<TuneKey, cublasLtMatmulAlgo_t> tuned_;
  Fp8Tuning tuning_;
  bool last_outer_ = false;
  std::string outer_status_ = "not asked yet";
};

}  // namespace specstack::cuda

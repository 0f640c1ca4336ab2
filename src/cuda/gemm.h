// cuBLAS GEMMs in the shapes the model needs, bf16 operands with fp32
// accumulation. Row-major thinking throughout: a "linear" is y = x · wᵀ with
// HF's [out, in] weights; cuBLAS's column-major view is handled here once.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "cuda/bf16_gemm_tuner.h"
#include "cuda/device_buffer.h"
#include "cuda/fp8_gemm.h"

namespace specstack::cuda {

// One linear layer's weight [out, in] on the device: bf16, or with
// --quantization fp8 e4m3 values plus one f32 scale per output row
// (cuda/fp8_quantize.h). Exactly one of w16 / w8 is set.
struct LinearWeight {
  const __nv_bfloat16* w16 = nullptr;  // [out, in] bf16
  const fp8* w8 = nullptr;             // [out, in] e4m3
  const float* scale = nullptr;        // [out] (w8 only)
};

// An FP8 GEMM's input rows already in e4m3 with their per-token scales
// (rmsnorm_quantize_fp8 writes them straight from the norm).
struct Fp8Rows {
  fp8* q = nullptr;        // [n, in] e4m3, dense
  float* scale = nullptr;  // [n] f32
};

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y[n, out] = x[n, in] · w[out, in]ᵀ.   x rows with stride ldx, y rows with stride ldy.
  // Up to kGemvMaxRows rows (decode) run the bandwidth kernel of gemv.h.
  // With bias [out] f32 it is added to every row (fused into gemv's epilogue).
  // FP8 weights: up to kFp8GemvMaxRows rows through fp8_gemv (bf16 activations),
  // more through a per-token activation quantization and the FP8 GEMM of fp8_gemm.h.
  void linear(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n, int64_t out,
              int64_t in, __nv_bfloat16* y, int64_t ldy, const float* bias = nullptr);
  // act[n, width] = bf16(silu(x · w_gate_upᵀ[:, :width]) * (x · w_gate_upᵀ[:, width:])):
  // gemv_silu_mul for decode rows; prefill rows (from swiglu_min_rows_) the
  // fused swiglu_gemm / fp8_swiglu_gemm on Hopper; else a GEMM into gate_up
  // [n, 2 * width] + silu_mul.
  void gate_up_silu(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w_gate_up, int64_t n,
                    int64_t width, int64_t in, __nv_bfloat16* gate_up, __nv_bfloat16* act);
  // A whole MLP: y[n, hidden] = (silu(x · gate_upᵀ[:width]) * (x · gate_upᵀ[width:])) · downᵀ,
  // x [n, ldx] with hidden = in columns, y rows with stride ldy. FP8 weights past the
  // GEMV rows: the SiLU rows are quantized per token for the down GEMM, either
  // from the fused kernel's bf16 act (fp8_swiglu_gemm + quantize_rows_fp8) or
  // straight from the gate/up product (silu_mul_quantize_fp8); otherwise
  // gate_up_silu + linear. gate_up [n, 2 * width] and act [n, width] bf16 are scratch.
  void mlp(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w_gate_up,
           const LinearWeight& w_down, int64_t n, int64_t width, int64_t hidden,
           __nv_bfloat16* gate_up, __nv_bfloat16* act, __nv_bfloat16* y, int64_t ldy);
  // Whether linear() / mlp() run these operands through the FP8 GEMM (FP8
  // weights, more rows than the GEMV takes, `in` a multiple of 16): then the
  // caller may write their input as e4m3 itself, into fp8_input(), and call
  // the Fp8Rows overloads below (one activation-quantize pass fewer).
  bool fp8_gemm_path(const LinearWeight& w, int64_t n, int64_t in) const;
  // The scratch for [n, in] pre-quantized input rows (reserve_fp8_activations
  // sized it). Stream-ordered: valid until the next FP8 linear / mlp.
  Fp8Rows fp8_input(int64_t n, int64_t in);
  // linear() / mlp() with the input already quantized (fp8_gemm_path true).
  void linear(const Fp8Rows& x8, const LinearWeight& w, int64_t n, int64_t out, int64_t in,
              __nv_bfloat16* y, int64_t ldy, const float* bias = nullptr);
  // down_scales not null: when the down projection runs the FP8 GEMM, it runs
  // unscaled and its scales land here for the caller's next pass
  // (add_rmsnorm_quantize_fp8); else it is set to {} and y is scaled.
  void mlp(const Fp8Rows& x8, const LinearWeight& w_gate_up, const LinearWeight& w_down, int64_t n,
           int64_t width, int64_t hidden, __nv_bfloat16* gate_up, __nv_bfloat16* act,
           __nv_bfloat16* y, int64_t ldy, Fp8Scales* down_scales = nullptr);
  // x [n, ldx] bf16 quantized into fp8_input(n, in) (quantize_rows_fp8).
  Fp8Rows quantize(const __nv_bfloat16* x, int64_t ldx, int64_t n, int64_t in);
  // The unscaled GEMM alone, y = x8.q · w8ᵀ in bf16: the caller applies the
  // returned scales in its next pass (rope_write_kv's QkvEpilogue,
  // add_rmsnorm_quantize_fp8's delta scales).
  Fp8Scales linear_unscaled(const Fp8Rows& x8, const LinearWeight& w, int64_t n, int64_t out,
                            int64_t in, __nv_bfloat16* y, int64_t ldy);
  // linear() with an f32 output (logits, router scores), bf16 weights.
  void linear_f32(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                  int64_t out, int64_t in, float* y, int64_t ldy);
  // The same for either weight kind (the LM head, e4m3 with --quantization
  // fp8): FP8 up to the GEMV rows through fp8_gemv's f32 output, more rows
  // quantized per token into Fp8Gemm::matmul_f32.
  void linear_f32(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n,
                  int64_t out, int64_t in, float* y, int64_t ldy);

  // Whether linear() adds a bias inside the GEMM for these operands (the
  // gemv path's epilogue); otherwise it adds it in a kernel of its own, which
  // a caller may fold into its next kernel instead (rope_write_kv).
  static bool fuses_bias(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n,
                         int64_t in);

  // Whether linear() runs these operands through a GEMV kernel (gemv.h or
  // fp8_gemv.h) rather than a GEMM (a fused decode kernel may take its place).
  bool gemv_path(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n,
                 int64_t in) const;

  cublasHandle_t handle() { return handle_; }
  // The bf16 GEMMs' per-shape algorithm choice (tests read what it tuned).
  const Bf16GemmTuner& bf16_tuner() const { return *bf16_; }

  // Scratch for the FP8 GEMMs' quantized activations: up to `rows` rows of up
  // to `max_in` columns. Called before any FP8 linear of more than
  // kFp8GemvMaxRows rows (never inside a graph capture: it may allocate).
  void reserve_fp8_activations(int64_t rows, int64_t max_in);
  // Rows up to which an FP8 linear runs the GEMV (bf16 activations) rather
  // than quantize + FP8 GEMM; at most kFp8GemvMaxRows.
  void set_fp8_gemv_max_rows(int64_t rows);
  // Rows from which a gate/up projection (bf16, or e4m3 past the FP8 GEMV
  // rows) runs the fused SwiGLU kernel (swiglu_gemm.h) where it supports the
  // operands; <= 0: never.
  void set_swiglu_min_rows(int64_t rows) { swiglu_min_rows_ = rows > 0 ? rows : -1; }
  // Whether e4m3 gate/up projections may take the fused kernel at all
  // (fp8_swiglu_gemm; SPECSTACK_FP8_SWIGLU_GEMM sets the default).
  void set_fp8_swiglu(bool on) { fp8_swiglu_ = on; }
  // Whether gate_up_silu on these operands takes the fused SwiGLU kernel
  // (its gate_up scratch untouched).
  bool gate_up_fused(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w_gate_up, int64_t n,
                     int64_t width, int64_t in, const __nv_bfloat16* act) const;
  // Rows of the gate_up scratch [rows, 2 width] that gate_up_silu / mlp need
  // for chunks of up to n rows with this weight (x, act: 16-byte aligned
  // dense buffers): below swiglu_min_rows_ where the fused kernel takes the
  // longer chunks, else n (the cuBLAS / cuBLASLt paths write every row).
  int64_t gate_up_scratch_rows(const LinearWeight& w_gate_up, int64_t n, int64_t width,
                               int64_t in) const;
  int64_t swiglu_gemm_calls() const { return swiglu_gemm_calls_; }

 private:
  void gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
            int64_t in, void* y, cudaDataType_t y_type, int64_t ldy);
  void fp8_gate_up_silu(const Fp8Rows& x8, const LinearWeight& w_gate_up, int64_t n, int64_t width,
                        int64_t in, __nv_bfloat16* gate_up, __nv_bfloat16* act);
  // act = the SwiGLU of x8's e4m3 gate/up projections, one fused kernel
  // (fp8_swiglu_gemm; gate_up_fused decided it).
  void fp8_swiglu(const Fp8Rows& x8, const LinearWeight& w_gate_up, int64_t n, int64_t width,
                  int64_t in, __nv_bfloat16* act);

  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  int64_t swiglu_min_rows_ = 0;  // -1: never the fused SwiGLU kernel (SPECSTACK_SWIGLU_GEMM=0)
  bool fp8_swiglu_ = false;
  int64_t swiglu_gemm_calls_ = 0;
  // A fixed workspace so cuBLAS never allocates (required inside graph capture).
  DeviceBuffer<uint8_t> workspace_;
  std::unique_ptr<Bf16GemmTuner> bf16_;  // every bf16 GEMM (gemm()) goes through it
  std::unique_ptr<Fp8Gemm> fp8_;         // created with the first reserve_fp8_activations
  DeviceBuffer<fp8> fp8_x_;              // [rows, in] quantized activations
  DeviceBuffer<float> fp8_x_scale_;      // [rows]
  DeviceBuffer<float> fp8_act_scale_;    // [rows] mlp's SiLU rows (fp8_x_ holds their e4m3)
  int64_t fp8_gemv_max_rows_;            // set_fp8_gemv_max_rows
};

}  // namespace specstack::cuda

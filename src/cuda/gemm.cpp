#include "cuda/gemm.h"

#include <cstdlib>
#include <string>

#include "base/check.h"
#include "cuda/elementwise.h"
#include "cuda/fp8_gemv.h"
#include "cuda/gemv.h"
#include "cuda/swiglu_gemm.h"

namespace specstack::cuda {

namespace {
constexpr size_t kWorkspaceBytes = size_t(64) << 20;
// FP8 linears: rows up to this run fp8_gemv, more quantize + FP8 GEMM.
// bench/fp8_bench on the H100 (docs/benchmarks.md), qwen2.5-7b layer sum
// qkv + o + gate_up + down: 2 rows 101 us GEMV vs 133 us GEMM path, 4 rows
// 176 vs 132 (the CUDA-core GEMV converts and multiplies every weight once
// per row; the GEMM path costs ~17 us fixed per matrix).
constexpr int64_t kFp8DefaultGemvMaxRows = 2;
// Whether FP8 prefill chunks take the fused e4m3 SwiGLU kernel by default.
// Off: correct on an H100 but slower than the cuBLASLt path it replaces
// (~1000 against ~1170 TFLOP/s; qwen2.5-7b FP8 prefill 8K +4%; session 39).
constexpr bool kFp8SwigluGemmDefault = false;
// From this many rows an FP8 linear without a pass to fold its scales into
// (o, down, qkv) scales inside cuBLASLt's GEMM: at 8192 rows that is 35-60 us
// faster per qwen2.5-7b matrix than the unscaled GEMM + scale_outer_bf16, at
// 16 rows up to 1.55x slower (fp8_bench).
constexpr int64_t kFp8ScalesInGemmMinRows = 256;
// bf16 gate/up projections of at least this many rows (prefill chunks) run
// the fused SwiGLU kernel (swiglu_gemm.h) instead of cuBLAS + silu_mul. H100,
// bench/mlp_bench (docs/benchmarks.md, session 35): 0.93-0.94x the time at
// 1696-8192 rows of the 7B, 0.80x at 8192 rows of the 0.5B; decode graphs
// (<= 256 rows) and verify steps stay on the tuned cuBLAS algorithms.
constexpr int64_t kSwigluGemmDefaultMinRows = 1024;
}  // namespace

Gemm::Gemm(cudaStream_t stream) : stream_(stream), fp8_gemv_max_rows_(kFp8DefaultGemvMaxRows) {
  SS_CUBLAS_CHECK(cublasCreate(&handle_));
  SS_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  workspace_.resize(kWorkspaceBytes);
  SS_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.nbytes()));
  // SPECSTACK_GEMM_TUNING=0: every bf16 GEMM on cublasGemmEx's default, no
  // timing (for profilers that serialise kernels and distort the timing, or
  // for the same algorithms in every process).
  const char* tuning = std::getenv("SPECSTACK_GEMM_TUNING");
  const int candidates = tuning != nullptr && std::string(tuning) == "0" ? 0 : 16;
  bf16_ = std::make_unique<Bf16GemmTuner>(stream_, handle_, workspace_.data(), workspace_.nbytes(),
                                          /*max_rows=*/1024, candidates);
  // SPECSTACK_SWIGLU_GEMM=0: the gate/up projection on cuBLAS + silu_mul at
  // every row count (A/B runs); a number: the fused kernel from that many rows.
  const char* swiglu = std::getenv("SPECSTACK_SWIGLU_GEMM");
  swiglu_min_rows_ = kSwigluGemmDefaultMinRows;
  if (swiglu != nullptr && *swiglu != '\0') {
    const long long rows = std::atoll(swiglu);
    swiglu_min_rows_ = rows > 0 ? rows : -1;
  }
  // SPECSTACK_FP8_SWIGLU_GEMM=1 / 0: the e4m3 twin on / off (its default:
  // kFp8SwigluGemmDefault), within the same row threshold.
  const char* fp8_swiglu = std::getenv("SPECSTACK_FP8_SWIGLU_GEMM");
  fp8_swiglu_ = kFp8SwigluGemmDefault;
  if (fp8_swiglu != nullptr && *fp8_swiglu != '\0') fp8_swiglu_ = std::string(fp8_swiglu) != "0";
}

Gemm::~Gemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void Gemm::reserve_fp8_activations(int64_t rows, int64_t max_in) {
  if (fp8_ == nullptr) {
    fp8_ = std::make_unique<Fp8Gemm>(stream_, workspace_.data(), workspace_.nbytes());
  }
  fp8_x_.reserve(static_cast<size_t>(rows * max_in));
  fp8_x_scale_.reserve(static_cast<size_t>(rows));
  fp8_act_scale_.reserve(static_cast<size_t>(rows));
}

void Gemm::mlp(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w_gate_up,
               const LinearWeight& w_down, int64_t n, int64_t width, int64_t hidden,
               __nv_bfloat16* gate_up, __nv_bfloat16* act, __nv_bfloat16* y, int64_t ldy) {
  if (n == 0) return;
  const bool fused =
      w_gate_up.w8 != nullptr && w_down.w8 != nullptr && n > fp8_gemv_max_rows_ && width % 16 == 0;
  if (!fused) {
    gate_up_silu(x, ldx, w_gate_up, n, width, hidden, gate_up, act);
    return linear(act, width, w_down, n, hidden, width, y, ldy);
  }
  mlp(quantize(x, ldx, n, hidden), w_gate_up, w_down, n, width, hidden, gate_up, act, y, ldy);
}

void Gemm::mlp(const Fp8Rows& x8, const LinearWeight& w_gate_up, const LinearWeight& w_down,
               int64_t n, int64_t width, int64_t hidden, __nv_bfloat16* gate_up, __nv_bfloat16* act,
               __nv_bfloat16* y, int64_t ldy, Fp8Scales* down_scales) {
  if (down_scales != nullptr) *down_scales = {};
  if (n == 0) return;
  SS_CHECK(w_gate_up.w8 != nullptr && w_down.w8 != nullptr);
  if (width % 16 != 0) {  // the down GEMM cannot take the SiLU rows as e4m3
    fp8_gate_up_silu(x8, w_gate_up, n, width, hidden, gate_up, act);
    return linear(act, width, w_down, n, hidden, width, y, ldy);
  }
  // fp8_x_ may hold x8 for the gate/up GEMM: stream-ordered before the SiLU
  // rows overwrite it.
  SS_CHECK_LE(static_cast<size_t>(n * width), fp8_x_.size());
  if (gate_up_fused(nullptr, hidden, w_gate_up, n, width, hidden, act)) {
    fp8_swiglu(x8, w_gate_up, n, width, hidden, act);
    quantize_rows_fp8(act, width, n, width, fp8_x_.data(), fp8_act_scale_.data(), stream_);
  } else {
    const bool scaled = fp8_->matmul(x8.q, x8.scale, w_gate_up.w8, w_gate_up.scale, n, 2 * width,
                                     hidden, gate_up, 2 * width,
                                     /*defer_scales=*/true);  // folded into the SiLU below
    silu_mul_quantize_fp8(gate_up, n, width, scaled ? nullptr : x8.scale,
                          scaled ? nullptr : w_gate_up.scale, fp8_x_.data(), fp8_act_scale_.data(),
                          stream_);
  }
  if (down_scales != nullptr) {  // the caller's next pass applies them
    fp8_->matmul(fp8_x_.data(), fp8_act_scale_.data(), w_down.w8, w_down.scale, n, hidden, width, y,
                 ldy, /*defer_scales=*/true);
    *down_scales = {fp8_act_scale_.data(), w_down.scale};
    return;
  }
  if (!fp8_->matmul(fp8_x_.data(), fp8_act_scale_.data(), w_down.w8, w_down.scale, n, hidden, width,
                    y, ldy, /*defer_scales=*/n < kFp8ScalesInGemmMinRows)) {
    scale_outer_bf16(y, ldy, n, hidden, fp8_act_scale_.data(), w_down.scale, nullptr, stream_);
  }
}

Fp8Rows Gemm::quantize(const __nv_bfloat16* x, int64_t ldx, int64_t n, int64_t in) {
  const Fp8Rows rows = fp8_input(n, in);
  quantize_rows_fp8(x, ldx, n, in, rows.q, rows.scale, stream_);
  return rows;
}

bool Gemm::fp8_gemm_path(const LinearWeight& w, int64_t n, int64_t in) const {
  return w.w8 != nullptr && n > fp8_gemv_max_rows_ && in % 16 == 0 && fp8_ != nullptr;
}

Fp8Rows Gemm::fp8_input(int64_t n, int64_t in) {
  SS_CHECK(fp8_ != nullptr);
  SS_CHECK_LE(static_cast<size_t>(n * in), fp8_x_.size());
  SS_CHECK_LE(static_cast<size_t>(n), fp8_x_scale_.size());
  return {fp8_x_.data(), fp8_x_scale_.data()};
}

Fp8Scales Gemm::linear_unscaled(const Fp8Rows& x8, const LinearWeight& w, int64_t n, int64_t out,
                                int64_t in, __nv_bfloat16* y, int64_t ldy) {
  SS_CHECK(w.w8 != nullptr);
  fp8_->matmul(x8.q, x8.scale, w.w8, w.scale, n, out, in, y, ldy, /*defer_scales=*/true);
  return {x8.scale, w.scale};
}

void Gemm::set_fp8_gemv_max_rows(int64_t rows) {
  SS_CHECK(rows >= 0 && rows <= kFp8GemvMaxRows);
  fp8_gemv_max_rows_ = rows;
}

void Gemm::linear(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& weight, int64_t n,
                  int64_t out, int64_t in, __nv_bfloat16* y, int64_t ldy, const float* bias) {
  if (n == 0) return;
  if (weight.w8 != nullptr) {
    if (gemv_path(x, ldx, weight, n, in)) {
      return fp8_gemv(x, ldx, weight.w8, weight.scale, n, out, in, y, nullptr, ldy, bias, stream_);
    }
    return linear(quantize(x, ldx, n, in), weight, n, out, in, y, ldy, bias);
  }
  const __nv_bfloat16* w = weight.w16;
  if (gemv_supported(x, ldx, w, n, in)) {
    return gemv(x, ldx, w, n, out, in, y, nullptr, ldy, stream_, bias);
  }
  gemm(x, ldx, w, n, out, in, y, CUDA_R_16BF, ldy);
  if (bias != nullptr) {
    add_bias(y, static_cast<int32_t>(n), static_cast<int32_t>(out), ldy, bias, stream_);
  }
}

void Gemm::linear(const Fp8Rows& x8, const LinearWeight& weight, int64_t n, int64_t out, int64_t in,
                  __nv_bfloat16* y, int64_t ldy, const float* bias) {
  if (n == 0) return;
  SS_CHECK(weight.w8 != nullptr);
  // With a bias the pass after an unscaled GEMM adds it too, so scales in
  // the GEMM would save nothing.
  const bool scales_in_gemm = n >= kFp8ScalesInGemmMinRows && bias == nullptr;
  if (fp8_->matmul(x8.q, x8.scale, weight.w8, weight.scale, n, out, in, y, ldy,
                   /*defer_scales=*/!scales_in_gemm)) {
    if (bias != nullptr) {
      add_bias(y, static_cast<int32_t>(n), static_cast<int32_t>(out), ldy, bias, stream_);
    }
  } else {  // scales and bias in one pass
    scale_outer_bf16(y, ldy, n, out, x8.scale, weight.scale, bias, stream_);
  }
}

bool Gemm::gemv_path(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n,
                     int64_t in) const {
  if (w.w8 != nullptr) return n <= fp8_gemv_max_rows_ && fp8_gemv_supported(x, ldx, w.w8, n, in);
  return gemv_supported(x, ldx, w.w16, n, in);
}

bool Gemm::fuses_bias(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w, int64_t n,
                      int64_t in) {
  // FP8: the GEMV adds the bias in its epilogue and the GEMM path in the same
  // pass that applies the scales, so there is no separate bias launch to fold.
  return w.w8 != nullptr || gemv_supported(x, ldx, w.w16, n, in);
}

void Gemm::gate_up_silu(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& weight, int64_t n,
                        int64_t width, int64_t in, __nv_bfloat16* gate_up, __nv_bfloat16* act) {
  if (n == 0) return;
  if (weight.w8 != nullptr) {
    if (gemv_path(x, ldx, weight, n, in)) {
      return fp8_gemv_silu_mul(x, ldx, weight.w8, weight.scale, n, width, in, act, stream_);
    }
    return fp8_gate_up_silu(quantize(x, ldx, n, in), weight, n, width, in, gate_up, act);
  }
  const __nv_bfloat16* w_gate_up = weight.w16;
  if (gemv_supported(x, ldx, w_gate_up, n, in)) {
    return gemv_silu_mul(x, ldx, w_gate_up, n, width, in, act, stream_);
  }
  if (gate_up_fused(x, ldx, weight, n, width, in, act)) {
    ++swiglu_gemm_calls_;
    return swiglu_gemm(x, ldx, w_gate_up, n, width, in, act, stream_);
  }
  gemm(x, ldx, w_gate_up, n, 2 * width, in, gate_up, CUDA_R_16BF, 2 * width);
  silu_mul(gate_up, static_cast<int32_t>(n), static_cast<int32_t>(width), act, stream_);
}

bool Gemm::gate_up_fused(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& w_gate_up,
                         int64_t n, int64_t width, int64_t in, const __nv_bfloat16* act) const {
  if (swiglu_min_rows_ <= 0 || n < swiglu_min_rows_) return false;
  if (w_gate_up.w8 != nullptr) {
    // e4m3: the rows go through fp8_x_ (dense, aligned) past the GEMV rows;
    // x and ldx do not matter.
    return fp8_swiglu_ && n > fp8_gemv_max_rows_ &&
           fp8_swiglu_gemm_supported(nullptr, w_gate_up.w8, w_gate_up.scale, n, width, in, act);
  }
  return swiglu_gemm_supported(x, ldx, w_gate_up.w16, n, width, in, act);
}

int64_t Gemm::gate_up_scratch_rows(const LinearWeight& w_gate_up, int64_t n, int64_t width,
                                   int64_t in) const {
  // Aligned stand-ins for x and act: only the shapes and the weight decide.
  if (gate_up_fused(nullptr, in, w_gate_up, n, width, in, nullptr)) {
    return swiglu_min_rows_ - 1;
  }
  return n;
}

void Gemm::fp8_gate_up_silu(const Fp8Rows& x8, const LinearWeight& weight, int64_t n, int64_t width,
                            int64_t in, __nv_bfloat16* gate_up, __nv_bfloat16* act) {
  if (gate_up_fused(nullptr, in, weight, n, width, in, act)) {
    return fp8_swiglu(x8, weight, n, width, in, act);
  }
  if (!fp8_->matmul(x8.q, x8.scale, weight.w8, weight.scale, n, 2 * width, in, gate_up, 2 * width,
                    /*defer_scales=*/true)) {
    if (width % 8 == 0) {  // the scales folded into the SiLU pass
      return scaled_silu_mul(gate_up, n, width, x8.scale, weight.scale, act, stream_);
    }
    scale_outer_bf16(gate_up, 2 * width, n, 2 * width, x8.scale, weight.scale, nullptr, stream_);
  }
  silu_mul(gate_up, static_cast<int32_t>(n), static_cast<int32_t>(width), act, stream_);
}

void Gemm::fp8_swiglu(const Fp8Rows& x8, const LinearWeight& weight, int64_t n, int64_t width,
                      int64_t in, __nv_bfloat16* act) {
  ++swiglu_gemm_calls_;
  fp8_swiglu_gemm(x8.q, x8.scale, weight.w8, weight.scale, n, width, in, act, stream_);
}

void Gemm::linear_f32(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n,
                      int64_t out, int64_t in, float* y, int64_t ldy) {
  if (gemv_supported(x, ldx, w, n, in))
    return gemv(x, ldx, w, n, out, in, nullptr, y, ldy, stream_);
  gemm(x, ldx, w, n, out, in, y, CUDA_R_32F, ldy);
}

void Gemm::linear_f32(const __nv_bfloat16* x, int64_t ldx, const LinearWeight& weight, int64_t n,
                      int64_t out, int64_t in, float* y, int64_t ldy) {
  if (weight.w8 == nullptr) return linear_f32(x, ldx, weight.w16, n, out, in, y, ldy);
  if (n == 0) return;
  if (gemv_path(x, ldx, weight, n, in)) {
    return fp8_gemv(x, ldx, weight.w8, weight.scale, n, out, in, nullptr, y, ldy, nullptr, stream_);
  }
  const Fp8Rows x8 = quantize(x, ldx, n, in);
  fp8_->matmul_f32(x8.q, x8.scale, weight.w8, weight.scale, n, out, in, y, ldy);
}

void Gemm::gemm(const __nv_bfloat16* x, int64_t ldx, const __nv_bfloat16* w, int64_t n, int64_t out,
                int64_t in, void* y, cudaDataType_t y_type, int64_t ldy) {
  if (n == 0) return;
  SS_CHECK_LE(in, ldx);
  SS_CHECK_LE(out, ldy);
  bf16_->gemm(x, ldx, w, n, out, in, y, y_type, ldy);
}

}  // namespace specstack::cuda

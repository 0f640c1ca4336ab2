// K/V rows in the CPU cache's element type (--kv-dtype f32 | bf16 | f16):
// the attention kernels store each new row rounded to nearest even and
// convert rows back to f32 as they load them, so a bf16 / f16 cache halves
// what long-context decode reads. A scalar reference and an AVX2 twin
// (F16C for f16, 16-bit shifts for bf16) that give the same bits; the AVX2
// file is compiled with -mavx2 -mfma -mf16c and chosen by CPUID as the
// quantized kernels are (quant_kernels.h).
#pragma once

#include <cstdint>

#include "backend/cpu/simd.h"
#include "tensor/dtype.h"

namespace specstack::cpu {

// Query heads one fused call serves (a GQA group is split into calls of at
// most this many).
inline constexpr int64_t kKvHeadsPerCall = 8;

struct KvRowCodec {
  // row [n] of the cache's dtype -> out [n] f32 (exact: every value widens).
  void (*load)(const void* row, int64_t n, float* out);
  // in [n] f32 -> row [n], rounding to nearest even (NaN stays NaN).
  void (*store)(const float* in, int64_t n, void* row);
  // Decode attention's inner loops with the widening fused in, so each K/V
  // value is converted once for all heads of the group (n_heads <=
  // kKvHeadsPerCall):
  //   scores[h * stride] = scale * (q[h * hd, +hd) · row)
  void (*dot_heads)(const float* q, int64_t n_heads, int64_t hd, const void* row, float scale,
                    float* scores, int64_t stride);
  //   acc[h * hd + d] += weights[h * stride] * row[d]
  void (*axpy_heads)(const float* weights, int64_t stride, int64_t n_heads, const void* row,
                     int64_t hd, float* acc);
};

// The codec of a cache dtype (f32, bf16, f16; others are a checked error) on
// `isa` (checked available), or on the best available one.
KvRowCodec kv_row_codec(DType dtype, Isa isa);
KvRowCodec kv_row_codec(DType dtype);

namespace kv_avx2 {
void dot_heads_f32(const float*, int64_t, int64_t, const void*, float, float*, int64_t);
void dot_heads_bf16(const float*, int64_t, int64_t, const void*, float, float*, int64_t);
void dot_heads_f16(const float*, int64_t, int64_t, const void*, float, float*, int64_t);
void axpy_heads_f32(const float*, int64_t, int64_t, const void*, int64_t, float*);
void axpy_heads_bf16(const float*, int64_t, int64_t, const void*, int64_t, float*);
void axpy_heads_f16(const float*, int64_t, int64_t, const void*, int64_t, float*);
void load_bf16(const void* row, int64_t n, float* out);
void store_bf16(const float* in, int64_t n, void* row);
void load_f16(const void* row, int64_t n, float* out);
void store_f16(const float* in, int64_t n, void* row);
}  // namespace kv_avx2

}  // namespace specstack::cpu

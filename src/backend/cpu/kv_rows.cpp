#include "backend/cpu/kv_rows.h"

#include <cstring>
#include <string>

#include "backend/cpu/quant_kernels.h"
#include "base/check.h"

namespace specstack::cpu {
namespace {

void load_f32(const void* row, int64_t n, float* out) {
  std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
}
void store_f32(const float* in, int64_t n, void* row) {
  std::memcpy(row, in, static_cast<size_t>(n) * sizeof(float));
}

void load_bf16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
}
void store_bf16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_bf16(in[i]);
}

void load_f16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(bits[i]);
}
void store_f16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_f16(in[i]);
}

inline float widen_f32(const void* row, int64_t i) {
  return static_cast<const float*>(row)[i];
}
inline float widen_bf16(const void* row, int64_t i) {
  return bf16_to_f32(static_cast<const uint16_t*>(row)[i]);
}
inline float widen_f16(const void* row, int64_t i) {
  return f16_to_f32(static_cast<const uint16_t*>(row)[i]);
}

template <float (*Widen)(const void*, int64_t)>
void dot_heads(const float* q, int64_t n_heads, int64_t hd, const void* row, float scale,
               float* scores, int64_t stride) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float sum = 0.0f;
    for (int64_t d = 0; d < hd; ++d) sum += q[h * hd + d] * Widen(row, d);
    scores[h * stride] = sum * scale;
  }
}

template <float (*Widen)(const void*, int64_t)>
void axpy_heads(const float* weights, int64_t stride, int64_t n_heads, const void* row, int64_t hd,
                float* acc) {
  for (int64_t d = 0; d < hd; ++d) {
    const float v = Widen(row, d);
    for (int64_t h = 0; h < n_heads; ++h) acc[h * hd + d] += weights[h * stride] * v;
  }
}

}  // namespace

KvRowCodec kv_row_codec(DType dtype, Isa isa) {
  SS_CHECK_MSG(quant_isa_available(isa),
               std::string("KV rows: isa not available here: ") + isa_name(isa));
  // No AVX-512 form of the KV rows: an AVX-512 VNNI CPU has AVX2 and takes it.
  const bool avx2 = isa != Isa::kScalar;
#if SS_QUANT_AVX2
#define SS_PICK(fn) (avx2 ? kv_avx2::fn : fn)
#define SS_AVX2(fn) kv_avx2::fn
#else
#define SS_PICK(fn) ((void)avx2, fn)
#define SS_AVX2(fn) nullptr
#endif
  switch (dtype) {
    case DType::kF32:
      return {load_f32, store_f32, avx2 ? SS_AVX2(dot_heads_f32) : dot_heads<widen_f32>,
              avx2 ? SS_AVX2(axpy_heads_f32) : axpy_heads<widen_f32>};
    case DType::kBF16:
      return {SS_PICK(load_bf16), SS_PICK(store_bf16),
              avx2 ? SS_AVX2(dot_heads_bf16) : dot_heads<widen_bf16>,
              avx2 ? SS_AVX2(axpy_heads_bf16) : axpy_heads<widen_bf16>};
    case DType::kF16:
      return {SS_PICK(load_f16), SS_PICK(store_f16),
              avx2 ? SS_AVX2(dot_heads_f16) : dot_heads<widen_f16>,
              avx2 ? SS_AVX2(axpy_heads_f16) : axpy_heads<widen_f16>};
    default:
      SS_CHECK_MSG(false, std::string("KV rows: no codec for ") + dtype_name(dtype));
  }
#undef SS_PICK
#undef SS_AVX2
  return {};
}

KvRowCodec kv_row_codec(DType dtype) {
  return kv_row_codec(dtype, quant_best_isa());
}

}  // namespace specstack::cpu

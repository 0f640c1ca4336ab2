// AVX2 twins of the KV row conversions (kv_rows.cpp): 8 values per step, the
// tail through the same scalar conversions as the reference, so both give
// the same bits for every input.
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include "backend/cpu/kv_rows.h"

namespace specstack::cpu::kv_avx2 {

void load_bf16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i));
    const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(wide));
  }
  for (; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
}

void store_bf16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  int64_t i = 0;
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    // Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top half.
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(bias, lsb)), 16);
    // NaN: truncate and set a quiet bit, as f32_to_bf16 does.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    const __m256i nan_bits = _mm256_or_si256(_mm256_srli_epi32(x, 16), quiet);
    const __m256i r = _mm256_blendv_epi8(rounded, nan_bits, nan);
    // 8 x u32 (each <= 0xffff) -> 8 x u16: pack within lanes, then order the lanes.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) bits[i] = f32_to_bf16(in[i]);
}

void load_f16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bits + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = _cvtsh_ss(bits[i]);
}

void store_f16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits + i), h);
  }
  for (; i < n; ++i) bits[i] = static_cast<uint16_t>(_cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT));
}

namespace {

// 8 values of a row from element d, widened to f32.
struct F32Row {
  static __m256 load8(const void* row, int64_t d) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + d);
  }
  static float load1(const void* row, int64_t d) { return static_cast<const float*>(row)[d]; }
};
struct Bf16Row {
  static __m256 load8(const void* row, int64_t d) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + d));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float load1(const void* row, int64_t d) {
    return bf16_to_f32(static_cast<const uint16_t*>(row)[d]);
  }
};
struct F16Row {
  static __m256 load8(const void* row, int64_t d) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + d)));
  }
  static float load1(const void* row, int64_t d) {
    return _cvtsh_ss(static_cast<const uint16_t*>(row)[d]);
  }
};

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Each 8 row values are widened once and multiplied into every head's
// accumulator (n_heads <= kKvHeadsPerCall).
template <typename Row>
void dot_heads(const float* q, int64_t n_heads, int64_t hd, const void* row, float scale,
               float* scores, int64_t stride) {
  __m256 acc[kKvHeadsPerCall];
  for (int64_t h = 0; h < n_heads; ++h) acc[h] = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    const __m256 k = Row::load8(row, d);
    for (int64_t h = 0; h < n_heads; ++h)
      acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + d), k, acc[h]);
  }
  for (int64_t h = 0; h < n_heads; ++h) {
    float sum = hsum(acc[h]);
    for (int64_t t = d; t < hd; ++t) sum += q[h * hd + t] * Row::load1(row, t);
    scores[h * stride] = sum * scale;
  }
}

template <typename Row>
void axpy_heads(const float* weights, int64_t stride, int64_t n_heads, const void* row, int64_t hd,
                float* acc) {
  __m256 w[kKvHeadsPerCall];
  for (int64_t h = 0; h < n_heads; ++h) w[h] = _mm256_set1_ps(weights[h * stride]);
  int64_t d = 0;
  for (; d + 8 <= hd; d += 8) {
    const __m256 v = Row::load8(row, d);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* a = acc + h * hd + d;
      _mm256_storeu_ps(a, _mm256_fmadd_ps(w[h], v, _mm256_loadu_ps(a)));
    }
  }
  for (; d < hd; ++d) {
    const float v = Row::load1(row, d);
    for (int64_t h = 0; h < n_heads; ++h) acc[h * hd + d] += weights[h * stride] * v;
  }
}

}  // namespace

void dot_heads_f32(const float* q, int64_t n, int64_t hd, const void* row, float scale, float* s,
                   int64_t stride) {
  dot_heads<F32Row>(q, n, hd, row, scale, s, stride);
}
void dot_heads_bf16(const float* q, int64_t n, int64_t hd, const void* row, float scale, float* s,
                    int64_t stride) {
  dot_heads<Bf16Row>(q, n, hd, row, scale, s, stride);
}
void dot_heads_f16(const float* q, int64_t n, int64_t hd, const void* row, float scale, float* s,
                   int64_t stride) {
  dot_heads<F16Row>(q, n, hd, row, scale, s, stride);
}
void axpy_heads_f32(const float* w, int64_t stride, int64_t n, const void* row, int64_t hd,
                    float* acc) {
  axpy_heads<F32Row>(w, stride, n, row, hd, acc);
}
void axpy_heads_bf16(const float* w, int64_t stride, int64_t n, const void* row, int64_t hd,
                     float* acc) {
  axpy_heads<Bf16Row>(w, stride, n, row, hd, acc);
}
void axpy_heads_f16(const float* w, int64_t stride, int64_t n, const void* row, int64_t hd,
                    float* acc) {
  axpy_heads<F16Row>(w, stride, n, row, hd, acc);
}

}  // namespace specstack::cpu::kv_avx2
#endif  // SS_QUANT_AVX2

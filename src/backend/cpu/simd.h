// SIMD helpers for the CPU kernels: AVX2 + FMA + F16C when the compiler
// targets them (the build uses -march=native), and a scalar twin of every
// helper that is always compiled. Kernels take an Isa argument so the tests
// can run both paths on one machine and compare them, and a build for a
// baseline x86-64 or ARM target still compiles and is correct.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/dtype.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SS_HAVE_AVX2 1
#include <immintrin.h>
#else
#define SS_HAVE_AVX2 0
#endif

namespace specstack::cpu {

// kAvxVnni (AVX2 with the 256-bit VEX vpdpbusd / vpdpwssd of Intel's client
// CPUs since Alder Lake) and kAvx512Vnni exist only for the quantized int8
// kernels (quant_kernels.h); every other kernel has scalar and AVX2 forms,
// and a CPU with either VNNI runs their AVX2 form.
enum class Isa : uint8_t { kScalar, kAvx2, kAvxVnni, kAvx512Vnni };

inline constexpr Isa kNativeIsa = SS_HAVE_AVX2 ? Isa::kAvx2 : Isa::kScalar;

// Whether this build contains the kernels for `isa`.
inline constexpr bool isa_compiled(Isa isa) {
  return isa == Isa::kScalar || (isa == Isa::kAvx2 && SS_HAVE_AVX2);
}

inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512Vnni:
      return "avx512vnni";
    default:
      return "scalar";
  }
}

namespace scalar {

// Element i of a weight array of dtype D, as f32.
template <DType D>
inline float load(const void* base, int64_t i);

template <>
inline float load<DType::kF32>(const void* base, int64_t i) {
  return static_cast<const float*>(base)[i];
}
template <>
inline float load<DType::kBF16>(const void* base, int64_t i) {
  return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
}
template <>
inline float load<DType::kF16>(const void* base, int64_t i) {
  return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
}

}  // namespace scalar

#if SS_HAVE_AVX2
namespace avx2 {

// Elements [i, i + 8) of a weight array of dtype D, as f32.
template <DType D>
inline __m256 load8(const void* base, int64_t i);

template <>
inline __m256 load8<DType::kF32>(const void* base, int64_t i) {
  return _mm256_loadu_ps(static_cast<const float*>(base) + i);
}
// bf16 is the top half of an f32: widen to 32 bits and shift into place.
template <>
inline __m256 load8<DType::kBF16>(const void* base, int64_t i) {
  __m128i half =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}
template <>
inline __m256 load8<DType::kF16>(const void* base, int64_t i) {
  return _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// e^x, relative error ~3e-7 (tested < 1e-6 against std::exp). exp(x) = 2^n *
// e^r with n = round(x / ln2) and |r| <= ln2 / 2, where a degree-7 Taylor
// polynomial is accurate to ~5e-9. Results below ~1.8e-38 flush to zero
// (so -inf gives 0, as softmax needs); above ln(FLT_MAX) give +inf.
inline __m256 exp8(__m256 x) {
  const __m256 kMin = _mm256_set1_ps(-86.9f);  // keeps 2^(n-1) a normal float
  const __m256 kMax = _mm256_set1_ps(88.7228f);
  const __m256 kLog2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 kLn2Hi = _mm256_set1_ps(0.693147182464599609375f);  // float(ln 2)
  const __m256 kLn2Lo = _mm256_set1_ps(-1.904654299957768e-09f);   // ln 2 - kLn2Hi
  // max/min return their second operand for NaN, so NaN flows through.
  __m256 xc = _mm256_min_ps(kMax, _mm256_max_ps(kMin, x));
  __m256 n =
      _mm256_round_ps(_mm256_mul_ps(xc, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, kLn2Hi, xc);
  r = _mm256_fnmadd_ps(n, kLn2Lo, r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n reaches 128 near FLT_MAX, whose 2^n is not a float: scale by 2^(n-1),
  // then by 2.
  __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126));
  __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  __m256 result = _mm256_mul_ps(_mm256_mul_ps(p, scale), _mm256_set1_ps(2.0f));
  result = _mm256_andnot_ps(_mm256_cmp_ps(x, kMin, _CMP_LT_OQ), result);
  return _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, kMax, _CMP_GT_OQ));
}

}  // namespace avx2
#endif  // SS_HAVE_AVX2

}  // namespace specstack::cpu

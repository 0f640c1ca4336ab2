// The Q4_0 decode kernels on prepared activations (quant_blocks.h Q4_0Act),
// AVX2: the same floats as quant_kernels_avx2.cpp's dot_q4_0 / dot4_q4_0 bit
// for bit, in fewer instructions per block. That kernel takes each block
// alone: unpack 16 bytes to 32 nibbles, subtract 8, move the sign onto the
// activations (two vpsignb), maddubs + madd, and convert two f16 scales per
// block. Here two weight blocks are unpacked together (one 32-byte vector:
// low nibbles of both, then high nibbles of both), multiplied as unsigned
// bytes against activations laid out in that order once per matmul, and the
// -8 offset is added as the activations' precomputed -8 Σa per int32 lane;
// the pair's two weight scales are converted in one vcvtph2ps against
// activation scales already in f32.
//
// Why the floats are the same: the one-block kernel's int32 lane i of block
// b is Σ (q - 8) a over elements 4i .. 4i + 3, scaled by f16(d_w) f16(d_a)
// and FMA'd into acc[b % 2] lane i; the blocks alternate between two
// accumulators and the row ends with hsum(acc[0] + acc[1]). Here `lo` holds
// lanes 0-3 of blocks b, b + 1 ([acc[0] 0-3 | acc[1] 0-3]) and `hi` lanes
// 4-7 ([acc[0] 4-7 | acc[1] 4-7]): each lane sees the same integer, the same
// product of scales and the same FMAs in the same order; at the end the two
// are put back as acc[0], acc[1] and finish as the one-block kernel does.
// Built with -mavx2 -mfma -mf16c and only called after CPUID says so, hence
// everything file-local but the entry points (quant_kernels.h) and the
// helpers of quant_simd_avx2.h; built again as the AVX-VNNI twins
// (quant_avxvnni: vpdpbusd for maddubs + madd + add, the same integers).
#if SS_QUANT_AVX2  // x86 builds only (CMakeLists.txt)
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_simd_avx2.h"

namespace specstack::cpu::SS_QUANT_AVX2_NS {
namespace {

using namespace quant;
using namespace simd;

// Σ of each 4 bytes of u (unsigned, <= 15) times a (signed) as int32 lanes,
// plus `off`: maddubs pairs stay within int16 (2 x 15 x 128).
inline __m256i dot_u4(__m256i u, __m256i a, __m256i off) {
  return dot_u8s8(off, u, a);
}

// [f16(d0) f16(da0) x 4 | f16(d1) f16(da1) x 4] for the weight blocks x[0],
// x[1] and their activation scales da[0], da[1] (f32 already): one
// conversion for both; the products are those of the one-block kernel.
inline __m256 pair_scales(const BlockQ4_0* x, const float* da) {
  const __m128 dw = pair_d(x);
  const __m128 dy = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(da)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_mul_ps(dw, dy)),
                                  _mm256_set_epi32(1, 1, 1, 1, 0, 0, 0, 0));
}

// See quant_kernels_avx2.cpp: while a four-row pass reads blocks b, b + 1
// of rows o .. o + 3, ask for those of rows o + 4 .. o + 7 (both ends of the
// 36 bytes, so every line of them).
inline void prefetch_pair(const BlockQ4_0* x, int64_t ahead) {
  const char* p = reinterpret_cast<const char*>(x) + ahead;
  _mm_prefetch(p, _MM_HINT_T0);
  _mm_prefetch(p + 2 * sizeof(BlockQ4_0) - 1, _MM_HINT_T0);
}

// R weight rows (w_stride bytes apart) against one prepared activation row.
template <int R>
void dot_rows(const uint8_t* w, int64_t w_stride, const void* prep, int64_t n_blocks, float* out) {
  const Q4_0ActView a = q4_0_act_view(prep, n_blocks);
  const BlockQ4_0* x[R];
  for (int r = 0; r < R; ++r) x[r] = reinterpret_cast<const BlockQ4_0*>(w + r * w_stride);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 lo[R], hi[R];  // [acc[0] lanes 0-3 | acc[1] lanes 0-3], [... 4-7 | ... 4-7]
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m256i a_lo = load256(a.qs + 32 * b), a_hi = load256(a.qs + 32 * b + 32);
    const __m256i off_lo = load256(a.off + 8 * b), off_hi = load256(a.off + 8 * b + 8);
    for (int r = 0; r < R; ++r) {
      const BlockQ4_0* xb = x[r] + b;
      if constexpr (R > 1) prefetch_pair(xb, R * w_stride);
      // [block b's 16 bytes | block b + 1's]: low nibbles are elements 0-15,
      // high nibbles 16-31 of each.
      const __m256i q = pair_qs(xb);
      const __m256i s_lo = dot_u4(_mm256_and_si256(q, m4), a_lo, off_lo);
      const __m256i s_hi = dot_u4(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), a_hi, off_hi);
      const __m256 d = pair_scales(xb, a.d + b);
      lo[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s_lo), lo[r]);
      hi[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s_hi), hi[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m256 acc0 = _mm256_permute2f128_ps(lo[r], hi[r], 0x20);
    const __m256 acc1 = _mm256_permute2f128_ps(lo[r], hi[r], 0x31);
    if (b < n_blocks) {  // an odd last block, laid out as it is: the one-block kernel's step
      const __m256i nib = nibbles_32(x[r][b].qs);
      const __m256i s = dot_u4(nib, load256(a.qs + 32 * b), load256(a.off + 8 * b));
      const __m256 d = _mm256_set1_ps(f16(x[r][b].d) * a.d[b]);
      acc0 = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc0);
    }
    out[r] = hsum(_mm256_add_ps(acc0, acc1));
  }
}

}  // namespace

void prepare_q4_0(const void* act_row, int64_t n_blocks, void* out) {
  const auto* y = static_cast<const BlockQ8_0*>(act_row);
  const Q4_0Act a = q4_0_act(out, n_blocks);
  const __m256i eight = _mm256_set1_epi8(8);
  // -8 Σ of each 4 values (maddubs pairs 8 (a + a') stay within int16).
  auto neg_off = [&](__m256i v) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), dot_u8s8(_mm256_setzero_si256(), eight, v));
  };
  for (int64_t b = 0; b < n_blocks; ++b) a.d[b] = _cvtsh_ss(y[b].d);
  int64_t b = 0;
  for (; b + 2 <= n_blocks; b += 2) {
    const __m256i y0 = load256(y[b].qs), y1 = load256(y[b + 1].qs);
    const __m256i v_lo = _mm256_permute2x128_si256(y0, y1, 0x20);  // [b 0-15 | b+1 0-15]
    const __m256i v_hi = _mm256_permute2x128_si256(y0, y1, 0x31);  // [b 16-31 | b+1 16-31]
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs + 32 * b), v_lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs + 32 * b + 32), v_hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.off + 8 * b), neg_off(v_lo));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.off + 8 * b + 8), neg_off(v_hi));
  }
  if (b < n_blocks) {
    const __m256i v = load256(y[b].qs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.qs + 32 * b), v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a.off + 8 * b), neg_off(v));
  }
}

float dot_q4_0_prepared(const void* w, const void* prep, int64_t n_blocks) {
  float out;
  dot_rows<1>(static_cast<const uint8_t*>(w), 0, prep, n_blocks, &out);
  return out;
}

void dot4_q4_0_prepared(const void* w, int64_t w_stride, const void* prep, int64_t n_blocks,
                        float* out) {
  dot_rows<4>(static_cast<const uint8_t*>(w), w_stride, prep, n_blocks, out);
}

}  // namespace specstack::cpu::SS_QUANT_AVX2_NS
#endif  // SS_QUANT_AVX2

#include "backend/cpu/cpu_elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_matmul.h"

namespace specstack::cpu {
namespace {

// Fewer elements than this per parallel share cost more in fork-join overhead
// than they gain (a decode step's kernels are tiny).
constexpr int64_t kMinElementsPerShare = 16384;

int64_t rows_grain(int64_t row_cost) {
  return std::max<int64_t>(1, kMinElementsPerShare / std::max<int64_t>(1, row_cost));
}

void check_isa(Isa isa) {
  SS_CHECK_MSG(isa_compiled(isa), std::string("isa not compiled: ") + isa_name(isa));
}

void check_f32_cpu(const Tensor& t) {
  SS_CHECK(t.device() == Device::kCpu);
  SS_CHECK(t.dtype() == DType::kF32);
}

float sum_squares(const float* x, int64_t n, Isa isa) {
  int64_t k = 0;
  float sum = 0.0f;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; k + 16 <= n; k += 16) {
      __m256 a = _mm256_loadu_ps(x + k), b = _mm256_loadu_ps(x + k + 8);
      acc0 = _mm256_fmadd_ps(a, a, acc0);
      acc1 = _mm256_fmadd_ps(b, b, acc1);
    }
    for (; k + 8 <= n; k += 8) {
      __m256 a = _mm256_loadu_ps(x + k);
      acc0 = _mm256_fmadd_ps(a, a, acc0);
    }
    sum = avx2::hsum(_mm256_add_ps(acc0, acc1));
  }
#endif
  for (; k < n; ++k) sum += x[k] * x[k];
  return sum;
}

// y = weight * (x * inv_rms), in that order, as HF computes it.
void scale_by_weight(const float* x, const float* weight, float inv_rms, int64_t n, float* y,
                     Isa isa) {
  int64_t k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    const __m256 s = _mm256_set1_ps(inv_rms);
    for (; k + 8 <= n; k += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + k), s);
      _mm256_storeu_ps(y + k, _mm256_mul_ps(_mm256_loadu_ps(weight + k), v));
    }
  }
#endif
  for (; k < n; ++k) y[k] = weight[k] * (x[k] * inv_rms);
}

void add_span(float* x, const float* y, int64_t n, Isa isa) {
  int64_t k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    for (; k + 8 <= n; k += 8) {
      _mm256_storeu_ps(x + k, _mm256_add_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
    }
  }
#endif
  for (; k < n; ++k) x[k] += y[k];
}

void silu_mul_span(const float* gate, const float* up, float* out, int64_t n, Isa isa) {
  int64_t k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (; k + 8 <= n; k += 8) {
      __m256 g = _mm256_loadu_ps(gate + k);
      __m256 e = avx2::exp8(_mm256_xor_ps(g, sign));
      __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
      _mm256_storeu_ps(out + k, _mm256_mul_ps(silu, _mm256_loadu_ps(up + k)));
    }
  }
#endif
  for (; k < n; ++k) out[k] = gate[k] / (1.0f + std::exp(-gate[k])) * up[k];
}

void exp_span(const float* x, int64_t n, float* out, Isa isa) {
  int64_t k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(out + k, avx2::exp8(_mm256_loadu_ps(x + k)));
  }
#endif
  for (; k < n; ++k) out[k] = std::exp(x[k]);
}

float row_max(const float* x, int64_t n, Isa isa) {
  int64_t k = 0;
  float best = -std::numeric_limits<float>::infinity();
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2 && n >= 8) {
    __m256 m = _mm256_set1_ps(best);
    for (; k + 8 <= n; k += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + k));
    best = avx2::hmax(m);
  }
#endif
  for (; k < n; ++k) best = std::max(best, x[k]);
  return best;
}

void softmax_row_impl(float* x, int64_t n, Isa isa) {
  const float max = row_max(x, n, isa);
  if (max == -std::numeric_limits<float>::infinity()) {  // nothing visible: no NaN from -inf - -inf
    std::fill(x, x + n, 0.0f);
    return;
  }
  int64_t k = 0;
  float sum = 0.0f;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    const __m256 m = _mm256_set1_ps(max);
    __m256 acc = _mm256_setzero_ps();
    for (; k + 8 <= n; k += 8) {
      __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + k), m));
      _mm256_storeu_ps(x + k, e);
      acc = _mm256_add_ps(acc, e);
    }
    sum = avx2::hsum(acc);
  }
#endif
  for (; k < n; ++k) {
    x[k] = std::exp(x[k] - max);
    sum += x[k];
  }
  const float inv = 1.0f / sum;  // sum >= 1: the max entry contributes e^0
  k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    const __m256 s = _mm256_set1_ps(inv);
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), s));
  }
#endif
  for (; k < n; ++k) x[k] *= inv;
}

}  // namespace

void embedding(ThreadPool& pool, const Tensor& table, std::span<const int32_t> ids, Tensor& out,
               Isa isa) {
  check_isa(isa);
  check_f32_cpu(out);
  SS_CHECK(table.device() == Device::kCpu);
  SS_CHECK_EQ(table.dim(), 2);
  const int64_t vocab = table.size(0);
  const int64_t dim = table.size(1);
  const int64_t n = static_cast<int64_t>(ids.size());
  SS_CHECK_EQ(out.numel(), n * dim);
  // The caller validated user token ids; an id out of range here is a bug.
  for (int32_t id : ids) SS_CHECK(id >= 0 && id < vocab);
  float* out_data = out.f32();
  pool.parallel_for(n, rows_grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      convert_rows_to_f32(table, ids[size_t(i)], ids[size_t(i)] + 1, out_data + i * dim, isa);
    }
  });
}

void rmsnorm(ThreadPool& pool, const Tensor& x, const Tensor& weight, float eps, Tensor& y,
             Isa isa) {
  check_isa(isa);
  check_f32_cpu(x);
  check_f32_cpu(y);
  check_f32_cpu(weight);
  const int64_t dim = weight.numel();
  SS_CHECK_GT(dim, 0);
  SS_CHECK_EQ(x.shape().back(), dim);
  SS_CHECK_EQ(x.numel(), y.numel());
  const int64_t rows = x.numel() / dim;
  const float* x_data = x.f32();
  const float* w_data = weight.f32();
  float* y_data = y.f32();
  pool.parallel_for(rows, rows_grain(2 * dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x_data + r * dim;
      const float mean = sum_squares(xr, dim, isa) / static_cast<float>(dim);
      const float inv_rms = 1.0f / std::sqrt(mean + eps);
      scale_by_weight(xr, w_data, inv_rms, dim, y_data + r * dim, isa);
    }
  });
}

void add_inplace(ThreadPool& pool, Tensor& x, const Tensor& y, Isa isa) {
  check_isa(isa);
  check_f32_cpu(x);
  check_f32_cpu(y);
  SS_CHECK_EQ(x.numel(), y.numel());
  float* x_data = x.f32();
  const float* y_data = y.f32();
  pool.parallel_for(x.numel(), kMinElementsPerShare, [&](int64_t begin, int64_t end) {
    add_span(x_data + begin, y_data + begin, end - begin, isa);
  });
}

void rope(ThreadPool& pool, Tensor& x, int64_t head_dim, std::span<const int32_t> positions,
          const Tensor& inv_freq) {
  check_f32_cpu(x);
  check_f32_cpu(inv_freq);
  SS_CHECK(head_dim > 0 && head_dim % 2 == 0);
  const int64_t half = head_dim / 2;
  SS_CHECK_EQ(inv_freq.numel(), half);
  const int64_t n = static_cast<int64_t>(positions.size());
  SS_CHECK_EQ(x.dim(), 2);
  SS_CHECK_EQ(x.size(0), n);
  const int64_t width = x.size(1);
  SS_CHECK_EQ(width % head_dim, 0);
  const int64_t n_heads = width / head_dim;
  float* x_data = x.f32();
  const float* freq = inv_freq.f32();
  // A cos/sin pair costs tens of cycles, shared by all heads of a row.
  const int64_t row_cost = width + 32 * half;
  pool.parallel_for(n, rows_grain(row_cost), [&](int64_t begin, int64_t end) {
    std::vector<float> cos_sin(size_t(2 * half));  // [cos(half) | sin(half)]
    float* cos_t = cos_sin.data();
    float* sin_t = cos_sin.data() + half;
    for (int64_t r = begin; r < end; ++r) {
      const float pos = static_cast<float>(positions[size_t(r)]);
      for (int64_t j = 0; j < half; ++j) {
        const float angle = pos * freq[j];  // fp32 product, as torch does
        cos_t[j] = std::cos(angle);
        sin_t[j] = std::sin(angle);
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* lo = x_data + r * width + h * head_dim;
        float* hi = lo + half;
        // HF rotate_half: out = x * cos + cat(-x_hi, x_lo) * sin
        for (int64_t j = 0; j < half; ++j) {
          const float a = lo[j], b = hi[j];
          lo[j] = a * cos_t[j] - b * sin_t[j];
          hi[j] = b * cos_t[j] + a * sin_t[j];
        }
      }
    }
  });
}

void silu_mul(ThreadPool& pool, const Tensor& gate, const Tensor& up, Tensor& out, Isa isa) {
  check_isa(isa);
  check_f32_cpu(gate);
  check_f32_cpu(up);
  check_f32_cpu(out);
  SS_CHECK_EQ(gate.numel(), up.numel());
  SS_CHECK_EQ(gate.numel(), out.numel());
  const float* g = gate.f32();
  const float* u = up.f32();
  float* o = out.f32();
  pool.parallel_for(gate.numel(), kMinElementsPerShare / 4, [&](int64_t begin, int64_t end) {
    silu_mul_span(g + begin, u + begin, o + begin, end - begin, isa);
  });
}

void softmax_row(float* x, int64_t n, Isa isa) { softmax_row_impl(x, n, isa); }

void softmax_rows(ThreadPool& pool, Tensor& x, Isa isa) {
  check_isa(isa);
  check_f32_cpu(x);
  SS_CHECK_GE(x.dim(), 1);
  const int64_t cols = x.shape().back();
  if (cols == 0) return;
  const int64_t rows = x.numel() / cols;
  float* data = x.f32();
  pool.parallel_for(rows, rows_grain(4 * cols), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) softmax_row_impl(data + r * cols, cols, isa);
  });
}

void exp_f32(const float* x, int64_t n, float* out, Isa isa) {
  check_isa(isa);
  exp_span(x, n, out, isa);
}

}  // namespace specstack::cpu

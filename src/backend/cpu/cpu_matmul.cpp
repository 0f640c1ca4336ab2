#include "backend/cpu/cpu_matmul.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "backend/cpu/quant_blocksum.h"
#include "backend/cpu/quant_gemm.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_panels.h"

namespace specstack::cpu {
namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Fewer multiply-adds than this per parallel share cost more in fork-join
// overhead than they gain, so small matmuls stay on the calling thread.
constexpr int64_t kMinMacsPerShare = 32768;

// Tiles of weight rows in matmul_large. Every sgemm call packs all of x
// again, so a tile should have >= 64 rows to amortise that (measured: 16-row
// tiles of a 4864-wide weight lost ~30%); the per-thread f32 buffer of a bf16
// tile is capped at a few MB so wide weights use fewer rows.
constexpr int64_t kTileBytes = 4 << 20;
constexpr int64_t kMaxTileRows = 256;
constexpr int64_t kMinTileRows = 64;
constexpr int64_t kTileRowMultiple = 16;
// Tiles per thread to aim for, so the dynamic tile queue can even out
// ragged last tiles and cores that other processes are using.
constexpr int64_t kTilesPerThread = 4;

struct Shapes {
  int64_t n;    // rows of x and y
  int64_t in;   // features in
  int64_t out;  // features out
};

Shapes check_shapes(const Tensor& x, const Tensor& w, const Tensor* bias, const Tensor& y) {
  SS_CHECK(x.device() == Device::kCpu && w.device() == Device::kCpu && y.device() == Device::kCpu);
  SS_CHECK_EQ(x.dim(), 2);
  SS_CHECK_EQ(w.dim(), 2);
  SS_CHECK_EQ(y.dim(), 2);
  SS_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32);
  SS_CHECK_MSG(w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16 ||
                   dtype_is_quantized(w.dtype()),
               std::string("matmul weight dtype ") + dtype_name(w.dtype()));
  Shapes s{x.size(0), x.size(1), w.size(0)};
  SS_CHECK_EQ(w.size(1), s.in);
  SS_CHECK_EQ(y.size(0), s.n);
  SS_CHECK_EQ(y.size(1), s.out);
  SS_CHECK_MSG(x.raw() != y.raw() || s.n == 0, "matmul output must not alias its input");
  if (bias != nullptr) {
    SS_CHECK(bias->dtype() == DType::kF32);
    SS_CHECK_EQ(bias->numel(), s.out);
  }
  return s;
}

// y = bias (or 0) for a matmul with no input features.
void fill_bias(const Shapes& s, const Tensor* bias, float* y) {
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t o = 0; o < s.out; ++o) y[i * s.out + o] = bias ? bias->f32()[o] : 0.0f;
  }
}

// Everything one share of the matvec path needs.
struct SmallArgs {
  Shapes s;
  const float* x;     // [n, in]
  const void* w;      // [out, in]
  const float* bias;  // [out] or null
  float* y;           // [n, out]
};

constexpr int kMaxRowsPerPass = 8;

template <DType D>
void small_range_scalar(const SmallArgs& a, int64_t o_begin, int64_t o_end) {
  const int64_t in = a.s.in;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const void* row = static_cast<const char*>(a.w) + o * in * int64_t(dtype_size(D));
    for (int64_t i0 = 0; i0 < a.s.n; i0 += kMaxRowsPerPass) {
      const int64_t nx = std::min<int64_t>(kMaxRowsPerPass, a.s.n - i0);
      const float* x = a.x + i0 * in;
      float acc[kMaxRowsPerPass] = {};
      for (int64_t k = 0; k < in; ++k) {
        const float wk = scalar::load<D>(row, k);
        for (int64_t i = 0; i < nx; ++i) acc[i] += wk * x[i * in + k];
      }
      for (int64_t i = 0; i < nx; ++i) {
        a.y[(i0 + i) * a.s.out + o] = acc[i] + (a.bias ? a.bias[o] : 0.0f);
      }
    }
  }
}

#if SS_HAVE_AVX2
// sums[i] = w_row · x[i, :] for NX rows of x (row stride `in`), U independent
// accumulators per x row to hide FMA latency. Each 8 weights are loaded and
// converted once and used NX times.
template <DType D, int NX, int U>
inline void dot_rows_avx2(const float* x, int64_t in, const void* w_row, float* sums) {
  __m256 acc[NX][U];
  for (int i = 0; i < NX; ++i) {
    for (int u = 0; u < U; ++u) acc[i][u] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 * U <= in; k += 8 * U) {
    __m256 wv[U];
    for (int u = 0; u < U; ++u) wv[u] = avx2::load8<D>(w_row, k + 8 * u);
    for (int i = 0; i < NX; ++i) {
      for (int u = 0; u < U; ++u) {
        acc[i][u] = _mm256_fmadd_ps(wv[u], _mm256_loadu_ps(x + i * in + k + 8 * u), acc[i][u]);
      }
    }
  }
  for (; k + 8 <= in; k += 8) {
    __m256 wv = avx2::load8<D>(w_row, k);
    for (int i = 0; i < NX; ++i) {
      acc[i][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * in + k), acc[i][0]);
    }
  }
  for (int i = 0; i < NX; ++i) {
    __m256 total = acc[i][0];
    for (int u = 1; u < U; ++u) total = _mm256_add_ps(total, acc[i][u]);
    float sum = avx2::hsum(total);
    for (int64_t kk = k; kk < in; ++kk) sum += scalar::load<D>(w_row, kk) * x[i * in + kk];
    sums[i] = sum;
  }
}

template <DType D>
void small_range_avx2(const SmallArgs& a, int64_t o_begin, int64_t o_end) {
  const int64_t in = a.s.in;
  float sums[kMaxRowsPerPass];
  for (int64_t o = o_begin; o < o_end; ++o) {
    const void* row = static_cast<const char*>(a.w) + o * in * int64_t(dtype_size(D));
    for (int64_t i0 = 0; i0 < a.s.n; i0 += kMaxRowsPerPass) {
      const int nx = static_cast<int>(std::min<int64_t>(kMaxRowsPerPass, a.s.n - i0));
      const float* x = a.x + i0 * in;
      // Fewer x rows leave registers for more accumulators per row.
      switch (nx) {
        case 1:
          dot_rows_avx2<D, 1, 4>(x, in, row, sums);
          break;
        case 2:
          dot_rows_avx2<D, 2, 2>(x, in, row, sums);
          break;
        case 3:
          dot_rows_avx2<D, 3, 2>(x, in, row, sums);
          break;
        case 4:
          dot_rows_avx2<D, 4, 2>(x, in, row, sums);
          break;
        case 5:
          dot_rows_avx2<D, 5, 1>(x, in, row, sums);
          break;
        case 6:
          dot_rows_avx2<D, 6, 1>(x, in, row, sums);
          break;
        case 7:
          dot_rows_avx2<D, 7, 1>(x, in, row, sums);
          break;
        default:
          dot_rows_avx2<D, 8, 1>(x, in, row, sums);
          break;
      }
      for (int i = 0; i < nx; ++i) {
        a.y[(i0 + i) * a.s.out + o] = sums[i] + (a.bias ? a.bias[o] : 0.0f);
      }
    }
  }
}
#endif  // SS_HAVE_AVX2

template <DType D>
void small_range(Isa isa, const SmallArgs& a, int64_t o_begin, int64_t o_end) {
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) return small_range_avx2<D>(a, o_begin, o_end);
#endif
  SS_CHECK_MSG(isa == Isa::kScalar, std::string("isa not compiled: ") + isa_name(isa));
  small_range_scalar<D>(a, o_begin, o_end);
}

template <DType D>
void convert_rows(const void* w, int64_t cols, int64_t row_begin, int64_t row_end, float* out,
                  Isa isa) {
  const int64_t count = (row_end - row_begin) * cols;
  const void* src = static_cast<const char*>(w) + row_begin * cols * int64_t(dtype_size(D));
  int64_t k = 0;
#if SS_HAVE_AVX2
  if (isa == Isa::kAvx2) {
    for (; k + 8 <= count; k += 8) _mm256_storeu_ps(out + k, avx2::load8<D>(src, k));
  }
#endif
  for (; k < count; ++k) out[k] = scalar::load<D>(src, k);
}

int64_t pick_tile_rows(const Shapes& s, int n_threads) {
  const int64_t by_cache = kTileBytes / (s.in * int64_t(sizeof(float)));
  const int64_t by_balance = ceil_div(s.out, kTilesPerThread * int64_t(n_threads));
  int64_t tile = std::clamp(std::min(by_cache, by_balance), kMinTileRows, kMaxTileRows);
  tile = ceil_div(tile, kTileRowMultiple) * kTileRowMultiple;
  return std::min(tile, s.out);
}

}  // namespace

void convert_rows_to_f32(const Tensor& w, int64_t row_begin, int64_t row_end, float* out, Isa isa) {
  SS_CHECK_EQ(w.dim(), 2);
  SS_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= w.size(0));
  const int64_t cols = w.size(1);
  switch (w.dtype()) {
    case DType::kF32:
      std::memcpy(out, w.data<float>() + row_begin * cols,
                  static_cast<size_t>((row_end - row_begin) * cols) * sizeof(float));
      return;
    case DType::kBF16:
      return convert_rows<DType::kBF16>(w.raw(), cols, row_begin, row_end, out, isa);
    case DType::kF16:
      return convert_rows<DType::kF16>(w.raw(), cols, row_begin, row_end, out, isa);
    default:
      if (dtype_is_quantized(w.dtype())) return dequantize_rows(w, row_begin, row_end, out);
      SS_CHECK_MSG(false, std::string("cannot convert dtype ") + dtype_name(w.dtype()));
  }
}

void matmul_small(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa) {
  const Shapes s = check_shapes(x, w, bias, y);
  SS_CHECK_MSG(!dtype_is_quantized(w.dtype()), "matmul_small: quantized weights use matmul_quant");
  if (s.n == 0 || s.out == 0) return;
  SmallArgs args{s, x.f32(), w.raw(), bias ? bias->f32() : nullptr, y.f32()};
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerShare / std::max<int64_t>(1, s.in * s.n));
  pool.parallel_for(s.out, grain, [&](int64_t begin, int64_t end) {
    switch (w.dtype()) {
      case DType::kF32:
        return small_range<DType::kF32>(isa, args, begin, end);
      case DType::kBF16:
        return small_range<DType::kBF16>(isa, args, begin, end);
      default:
        return small_range<DType::kF16>(isa, args, begin, end);
    }
  });
}

void matmul_large(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                  Isa isa) {
  const Shapes s = check_shapes(x, w, bias, y);
  if (s.n == 0 || s.out == 0) return;
  float* y_data = y.f32();
  if (s.in == 0) return fill_bias(s, bias, y_data);
  const float* x_data = x.f32();
  const int64_t tile_rows = pick_tile_rows(s, pool.n_threads());
  const int64_t n_tiles = ceil_div(s.out, tile_rows);
  // sgemm itself is single-threaded (see the CpuBackend constructor): each
  // share is one core pulling tiles from a shared queue until none are left.
  const int64_t macs_per_tile = s.n * s.in * tile_rows;
  const int64_t n_shares =
      std::min<int64_t>({pool.n_threads(), n_tiles,
                         std::max<int64_t>(1, n_tiles * macs_per_tile / kMinMacsPerShare)});
  std::atomic<int64_t> next_tile{0};
  pool.parallel_for(n_shares, 1, [&](int64_t, int64_t) {
    std::unique_ptr<float[]> converted;  // [tile_rows, in], only for bf16/f16
    if (w.dtype() != DType::kF32) converted.reset(new float[size_t(tile_rows * s.in)]);
    for (int64_t t = next_tile.fetch_add(1); t < n_tiles; t = next_tile.fetch_add(1)) {
      const int64_t o0 = t * tile_rows;
      const int64_t rows = std::min(tile_rows, s.out - o0);
      const float* w_tile;  // [rows, in]
      if (w.dtype() == DType::kF32) {
        w_tile = w.data<float>() + o0 * s.in;
      } else {
        convert_rows_to_f32(w, o0, o0 + rows, converted.get(), isa);
        w_tile = converted.get();
      }
      // y[:, o0 : o0 + rows] = x · w_tileᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(s.n), blasint(rows),
                  blasint(s.in), 1.0f, x_data, blasint(s.in), w_tile, blasint(s.in), 0.0f,
                  y_data + o0, blasint(s.out));
      if (bias != nullptr) {
        const float* b = bias->f32() + o0;
        for (int64_t i = 0; i < s.n; ++i) {
          float* y_row = y_data + i * s.out + o0;
          for (int64_t j = 0; j < rows; ++j) y_row[j] += b[j];
        }
      }
    }
  });
}

int64_t matmul_blocksum_min_rows(DType dtype, Isa isa) {
  const bool together = quant_has_kernel(dtype) && quant_isa_available(isa) &&
                        quant_kernel(dtype, isa).dot_acts != nullptr && quant_acts_together();
  if (!together) return matmul_blocksum_min_rows();
  return isa == Isa::kAvx512Vnni ? 16 : matmul_quant_max_rows() + 1;
}

void matmul(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  SS_CHECK_EQ(x.dim(), 2);
  if (w.dtype() == DType::kQ8_0P) {  // Q8_0 panels (quant_panels.h)
    if (x.size(0) <= kPanelMaxRows)
      return matmul_q8_0_panels(pool, x, w, bias, y, quant_best_isa());
    if (quant_prefill_uses_blocksum(quant_prefill_path(), w.dtype(), quant_best_isa(), x.size(0)))
      return matmul_quant_blocksum(pool, x, w, bias, y, quant_best_isa());
    return matmul_large(pool, x, w, bias, y);
  }
  if (dtype_is_quantized(w.dtype())) {
    if (x.size(0) >= matmul_blocksum_min_rows(w.dtype(), quant_best_isa()) &&
        quant_prefill_uses_blocksum(quant_prefill_path(), w.dtype(), quant_best_isa(), x.size(0)))
      return matmul_quant_blocksum(pool, x, w, bias, y, quant_best_isa());
    if (x.size(0) <= matmul_quant_max_rows())
      return matmul_quant(pool, x, w, bias, y, quant_best_isa(), quant_rows_per_pass(),
                          QuantActForm::kAuto, quant_acts_together());
    if (quant_prefill_uses_tiles(quant_prefill_path(), w.dtype(), quant_best_isa(), x.size(0)))
      return matmul_quant_tiled(pool, x, w, bias, y, quant_best_isa());
    return matmul_large(pool, x, w, bias, y);
  }
  if (x.size(0) <= matmul_small_max_rows(w.dtype())) {
    matmul_small(pool, x, w, bias, y);
  } else {
    matmul_large(pool, x, w, bias, y);
  }
}

}  // namespace specstack::cpu

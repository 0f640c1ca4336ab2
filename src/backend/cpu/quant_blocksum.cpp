#include "backend/cpu/quant_blocksum.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_panels.h"
#include "gguf/gguf_dequant.h"

namespace specstack::cpu {

#if SS_QUANT_AVX2
// A group is 16 activation rows; a packed group holds, per block, 8 x 64
// bytes (dword k of each of the 16 rows, + 128) and 16 f32 scales. The
// tables hold, per weight row and block, -128 Σw (int32) and the f32 scale.
// Packing and tables: quant_blocksum_avx2.cpp's AVX2 build; the tiles: its
// AVX-VNNI build (one group, 256-bit) and quant_blocksum_avx512.cpp.
#define SS_DECLARE_BLOCKSUM_TILE                                                                 \
  int blocksum_tile_rows();                                                                      \
  int blocksum_tile_groups();                                                                    \
  void blocksum_tile(const void* w, int64_t w_stride, const int32_t* corr, const float* dw,      \
                     int64_t tab_stride, const uint8_t* pa, const float* pas, int64_t ga_stride, \
                     int64_t gs_stride, int64_t n_blocks, int rows, int groups, float* acc_io,   \
                     bool first);
namespace quant_avx2 {
void blocksum_pack_act(const void* act, int64_t act_stride, int64_t n_rows, int64_t n_blocks,
                       uint8_t* out, float* out_scales);
void blocksum_weight_tables(const void* w, int64_t w_stride, int64_t n_rows, int64_t n_blocks,
                            int32_t* corr, float* dw);
}  // namespace quant_avx2
namespace quant_avxvnni {
SS_DECLARE_BLOCKSUM_TILE
}  // namespace quant_avxvnni
#if SS_QUANT_AVX512
namespace quant_avx512vnni {
SS_DECLARE_BLOCKSUM_TILE
}  // namespace quant_avx512vnni
#endif
#undef SS_DECLARE_BLOCKSUM_TILE
#endif

namespace {

constexpr int64_t kLanes = 16;             // activation rows per group
constexpr int64_t kGroupBlockBytes = 512;  // packed bytes per group and block

// Weight rows whose tables are made at once and which every activation
// group passes over (32 rows of a 2048-wide Q8_0 matrix: 70 KB, L2).
constexpr int64_t kCacheRows = 32;

// Blocks per pass over a cache tile: a group pair's packed chunk (2 x 16 x
// 576 bytes = 18 KB) stays in L1 while the cache tile's register tiles run
// over it; the f32 accumulators carry between chunks, so the FMA chain of
// every lane is that of one pass (the same floats).
constexpr int64_t kChunkBlocks = 16;

// Fewer multiply-adds than this per share cost more in fork-join overhead
// than they gain (as matmul_quant).
constexpr int64_t kMinMacsPerShare = 32768;

// 64-byte aligned scratch (the packed rows are loaded as whole zmm).
template <typename T>
struct Aligned {
  explicit Aligned(int64_t n) : raw(new uint8_t[size_t(n) * sizeof(T) + 64]) {}
  T* get() const {
    return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(raw.get()) + 63) & ~uintptr_t{63});
  }
  std::unique_ptr<uint8_t[]> raw;
};

}  // namespace

namespace {

// The 32 values of sub-block pair j (0..3) of a Q4_K / Q5_K super-block:
// low nibbles of ql[32j ..] (sub-block 2j), then high ones (2j + 1), the
// fifth bits from qh (Q5_K: bit 2j / 2j + 1 of qh[l]). A branch-free loop
// over 32 bytes that the compiler can vectorize: this runs per cache tile of
// every K-quant matmul on the GEMM (with the per-element form and its Q5_K
// branch an 8192 x 2048 Q4_K matmul of one activation row took 3.16 ms
// instead of 2.68, 2 threads, dev VM).
template <bool kFive>
void unpack_pair(const uint8_t* ql, const uint8_t* qh, int j, int8_t* low, int8_t* high) {
  for (int l = 0; l < 32; ++l) {
    const int q = ql[l];
    const int bits = kFive ? qh[l] >> (2 * j) : 0;
    low[l] = static_cast<int8_t>((q & 0x0F) | ((bits & 1) << 4));
    high[l] = static_cast<int8_t>((q >> 4) | ((bits & 2) << 3));
  }
}

// K-quant weight rows (Q4_K, Q5_K) as the kernel's Q8_0 rows: each
// 32-value sub-block's q (0..15 / 0..31, valid int8) in out's qs (its d
// unused), its scale d * sc in scales and its min dmin * m in mins [n_rows,
// n_blocks] f32, so that w = scale * q - min exactly as dequantization has it.
template <bool kFive>
void unpack_kquant_rows_t(const uint8_t* w, int64_t w_row_bytes, int64_t n_rows, int64_t n_blocks,
                          quant::BlockQ8_0* out, float* scales, float* mins) {
  const int64_t super_bytes = kFive ? sizeof(quant::BlockQ5_K) : sizeof(quant::BlockQ4_K);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t s = 0; s < n_blocks / 8; ++s) {
      const uint8_t* block = w + r * w_row_bytes + s * super_bytes;
      uint16_t d16, dmin16;
      std::memcpy(&d16, block, 2);
      std::memcpy(&dmin16, block + 2, 2);
      const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
      const uint8_t* sc = block + 4;
      const uint8_t* qh = block + 16;  // Q5_K only
      const uint8_t* ql = block + (kFive ? 48 : 16);
      const int64_t b0 = r * n_blocks + s * 8;
      for (int sub = 0; sub < 8; ++sub) {
        int scale = 0, min = 0;
        gguf::scale_min_k4(sub, sc, scale, min);
        scales[b0 + sub] = d * static_cast<float>(scale);
        mins[b0 + sub] = dmin * static_cast<float>(min);
        out[b0 + sub].d = 0;
      }
      for (int j = 0; j < 4; ++j)
        unpack_pair<kFive>(ql + 32 * j, qh, j, out[b0 + 2 * j].qs, out[b0 + 2 * j + 1].qs);
    }
  }
}

void unpack_kquant_rows(DType dtype, const uint8_t* w, int64_t w_row_bytes, int64_t n_rows,
                        int64_t n_blocks, quant::BlockQ8_0* out, float* scales, float* mins) {
  if (dtype == DType::kQ5_K)
    return unpack_kquant_rows_t<true>(w, w_row_bytes, n_rows, n_blocks, out, scales, mins);
  unpack_kquant_rows_t<false>(w, w_row_bytes, n_rows, n_blocks, out, scales, mins);
}

// Q4_0 / Q5_0 rows as Q8_0 rows, exactly: q - 8 (q - 16) is a valid int8
// and the block's f16 scale carries over.
void unpack_legacy_rows(DType dtype, const uint8_t* w, int64_t w_row_bytes, int64_t n_rows,
                        int64_t n_blocks, quant::BlockQ8_0* out) {
  const bool five_bit = dtype == DType::kQ5_0;
  const int64_t block_bytes = five_bit ? sizeof(quant::BlockQ5_0) : sizeof(quant::BlockQ4_0);
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      const uint8_t* block = w + r * w_row_bytes + blk * block_bytes;
      quant::BlockQ8_0& o = out[r * n_blocks + blk];
      std::memcpy(&o.d, block, 2);
      uint32_t qh = 0;
      if (five_bit) std::memcpy(&qh, block + 2, 4);
      const uint8_t* qs = block + (five_bit ? 6 : 2);
      const int offset = five_bit ? 16 : 8;
      for (int j = 0; j < 16; ++j) {
        const int lo = (qs[j] & 0x0F) | (five_bit ? int((qh >> j) & 1) << 4 : 0);
        const int hi = (qs[j] >> 4) | (five_bit ? int((qh >> (j + 16)) & 1) << 4 : 0);
        o.qs[j] = static_cast<int8_t>(lo - offset);
        o.qs[j + 16] = static_cast<int8_t>(hi - offset);
      }
    }
  }
}

}  // namespace

bool quant_blocksum_available(DType dtype, Isa isa) {
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
  return (dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ5_0 ||
          dtype == DType::kQ4_K || dtype == DType::kQ5_K || dtype == DType::kQ8_0P) &&
         (isa == Isa::kAvx512Vnni || isa == Isa::kAvxVnni) && quant_isa_available(isa);
#else
  (void)dtype;
  (void)isa;
  return false;
#endif
}

float blocksum_dot_ref(const void* w_row, const void* act_row, int64_t n_blocks) {
  const auto* w = static_cast<const quant::BlockQ8_0*>(w_row);
  const auto* a = static_cast<const quant::BlockQ8_0*>(act_row);
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t sum = 0;
    for (int j = 0; j < quant::kQk; ++j) sum += int32_t{w[b].qs[j]} * int32_t{a[b].qs[j]};
    acc = std::fma(f16_to_f32(w[b].d) * f16_to_f32(a[b].d), float(sum), acc);
  }
  return acc;
}

void matmul_quant_blocksum(ThreadPool& pool, const Tensor& x, const Tensor& w, const Tensor* bias,
                           Tensor& y, Isa isa) {
  check_quant_matmul_args(x, w, bias, y);
  const int64_t n = x.size(0), in = x.size(1), out = w.size(0);
  SS_CHECK_MSG(quant_blocksum_available(w.dtype(), isa),
               std::string("matmul_quant_blocksum: not for ") + dtype_name(w.dtype()) + " on " +
                   isa_name(isa));
  if (n == 0 || out == 0) return;
#if SS_QUANT_AVX2 && SS_QUANT_AVX512
  // The isa's register tile: R weight rows x G groups of 16 activation rows.
  const bool zmm = isa == Isa::kAvx512Vnni;
  const int64_t R =
      zmm ? quant_avx512vnni::blocksum_tile_rows() : quant_avxvnni::blocksum_tile_rows();
  const int64_t G =
      zmm ? quant_avx512vnni::blocksum_tile_groups() : quant_avxvnni::blocksum_tile_groups();
  const auto tile_fn = zmm ? quant_avx512vnni::blocksum_tile : quant_avxvnni::blocksum_tile;
  // Activations as Q8_0 blocks whatever the weights (32 values a block: a
  // K-quant sub-block).
  const QuantKernel k = quant_kernel(DType::kQ8_0, isa);
  SS_CHECK_EQ(in % dtype_block_elements(w.dtype()), 0);  // rows are whole weight blocks
  const int64_t n_blocks = in / k.act_block_elements;
  const int64_t act_row_bytes = n_blocks * int64_t(k.act_block_bytes);
  const int64_t w_row_bytes = int64_t(dtype_bytes(w.dtype(), in));
  const std::unique_ptr<uint8_t[]> act = quantize_activation_rows(pool, k, x);
  // K-quants: w = scale * q - min per block, so y = Σ scale d_a (q · a) (the
  // kernel, on the unpacked q) - Σ min (d_a Σ a); act_sums [n, n_blocks]
  // holds d_a Σ a.
  const bool kquant = w.dtype() == DType::kQ4_K || w.dtype() == DType::kQ5_K;
  const bool unpacks = w.dtype() != DType::kQ8_0;  // Q4_0 / Q5_0: exact Q8_0 blocks
  std::vector<float> act_sums;
  if (kquant) {
    act_sums.resize(size_t(n * n_blocks));
    const auto* a = reinterpret_cast<const quant::BlockQ8_0*>(act.get());
    for (int64_t i = 0; i < n * n_blocks; ++i) {
      int32_t sum = 0;
      for (int j = 0; j < quant::kQk; ++j) sum += a[i].qs[j];
      act_sums[size_t(i)] = f16_to_f32(a[i].d) * static_cast<float>(sum);
    }
  }

  // pa [n_groups][n_blocks][8][16] dwords a + 128, pas [n_groups][n_blocks][16].
  const int64_t n_groups = (n + kLanes - 1) / kLanes;
  const int64_t ga_stride = n_blocks * kGroupBlockBytes, gs_stride = n_blocks * kLanes;
  const Aligned<uint8_t> pa(n_groups * ga_stride);
  const Aligned<float> pas(n_groups * gs_stride);
  pool.parallel_for(n_groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      quant_avx2::blocksum_pack_act(act.get() + g * kLanes * act_row_bytes, act_row_bytes,
                                    std::min(kLanes, n - g * kLanes), n_blocks,
                                    pa.get() + g * ga_stride, pas.get() + g * gs_stride);
    }
  });

  const auto* w_data = static_cast<const uint8_t*>(w.raw());
  const float* b = bias ? bias->f32() : nullptr;
  float* y_data = y.f32();
  const int64_t grain =
      std::max<int64_t>(R, (kMinMacsPerShare / std::max<int64_t>(1, in * n) + R - 1) / R * R);
  pool.parallel_for(out, grain, [&](int64_t begin, int64_t end) {
    const std::unique_ptr<int32_t[]> corr(new int32_t[size_t(kCacheRows * n_blocks)]);
    const std::unique_ptr<float[]> dw(new float[size_t(kCacheRows * n_blocks)]);
    // K-quants: the cache tile's rows unpacked, and their blocks' mins.
    const int64_t unpacked_row_bytes = n_blocks * int64_t(sizeof(quant::BlockQ8_0));
    std::unique_ptr<quant::BlockQ8_0[]> unpacked;
    std::unique_ptr<float[]> mins, unused_scales;
    if (unpacks) unpacked.reset(new quant::BlockQ8_0[size_t(kCacheRows * n_blocks)]);
    if (kquant) {
      mins.reset(new float[size_t(kCacheRows * n_blocks)]);
      unused_scales.reset(new float[size_t(kCacheRows * n_blocks)]);
    }
    std::vector<float> min_terms(kquant ? size_t(n * kCacheRows) : 0);
    // acc [kCacheRows / R tiles][R x G x 16]: one group pair's accumulators.
    const Aligned<float> acc(kCacheRows * G * kLanes);
    for (int64_t o0 = begin; o0 < end; o0 += kCacheRows) {
      const int64_t o1 = std::min(o0 + kCacheRows, end);
      // The rows the kernel reads (panels: set below, after unpacking).
      const uint8_t* tile_w = w.dtype() == DType::kQ8_0P ? nullptr : w_data + o0 * w_row_bytes;
      int64_t tile_stride = w_row_bytes;
      if (kquant) {
        unpack_kquant_rows(w.dtype(), tile_w, w_row_bytes, o1 - o0, n_blocks, unpacked.get(),
                           dw.get(), mins.get());
      } else if (w.dtype() == DType::kQ8_0P) {  // the panels' rows as stored in a GGUF
        panel_rows_to_q8_0(w, o0, o1, unpacked.get());
      } else if (unpacks) {
        unpack_legacy_rows(w.dtype(), tile_w, w_row_bytes, o1 - o0, n_blocks, unpacked.get());
      }
      if (unpacks) {
        tile_w = reinterpret_cast<const uint8_t*>(unpacked.get());
        tile_stride = unpacked_row_bytes;
      }
      // corr = -128 Σq; dw = the blocks' f16 scales (Q8_0, Q4_0, Q5_0; a
      // K-quant keeps the f32 scales unpacking wrote).
      quant_avx2::blocksum_weight_tables(tile_w, tile_stride, o1 - o0, n_blocks, corr.get(),
                                         kquant ? unused_scales.get() : dw.get());
      if (kquant) {
        // min_terms [n, kCacheRows] = act_sums [n, n_blocks] · mins [rows, n_blocks]ᵀ:
        // Σ_blocks min · d_a Σ a for every (activation row, weight row), in
        // one small sgemm (single-threaded here, as every sgemm of this
        // backend) rather than an FMA chain per output.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, blasint(n), blasint(o1 - o0),
                    blasint(n_blocks), 1.0f, act_sums.data(), blasint(n_blocks), mins.get(),
                    blasint(n_blocks), 0.0f, min_terms.data(), blasint(kCacheRows));
      }
      for (int64_t g0 = 0; g0 < n_groups; g0 += G) {
        const int groups = int(std::min(G, n_groups - g0));
        for (int64_t c0 = 0; c0 < n_blocks; c0 += kChunkBlocks) {
          const int64_t chunk = std::min(kChunkBlocks, n_blocks - c0);
          for (int64_t o = o0; o < o1; o += R) {
            const int rows = int(std::min(R, o1 - o));
            tile_fn(tile_w + (o - o0) * tile_stride + c0 * tile_stride / n_blocks, tile_stride,
                    corr.get() + (o - o0) * n_blocks + c0, dw.get() + (o - o0) * n_blocks + c0,
                    n_blocks, pa.get() + g0 * ga_stride + c0 * kGroupBlockBytes,
                    pas.get() + g0 * gs_stride + c0 * kLanes, ga_stride, gs_stride, chunk, rows,
                    groups, acc.get() + (o - o0) * G * kLanes, c0 == 0);
          }
        }
        // acc of tile t = (o - o0) / R: [r][g][lane] with g < groups.
        for (int64_t o = o0; o < o1; o += R) {
          const int rows = int(std::min(R, o1 - o));
          const float* a = acc.get() + (o - o0) * G * kLanes;
          for (int r = 0; r < rows; ++r) {
            for (int g = 0; g < groups; ++g) {
              const int64_t row0 = (g0 + g) * kLanes;
              const int64_t lanes = std::min(kLanes, n - row0);
              const float add = b ? b[o + r] : 0.0f;
              for (int64_t l = 0; l < lanes; ++l) {
                float value = a[(r * groups + g) * kLanes + l];
                if (kquant) value -= min_terms[(row0 + l) * kCacheRows + (o - o0 + r)];
                y_data[(row0 + l) * out + o + r] = value + add;
              }
            }
          }
        }
      }
    }
  });
#endif
}

}  // namespace specstack::cpu

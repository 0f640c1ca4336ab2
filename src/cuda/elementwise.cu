// Memory-bound kernels of the forward pass (see elementwise.h for the
// contracts). Two shapes of kernel:
//  * row kernels (the norms, rope): one CTA (or one warp for a head) per row,
//    since the row needs a reduction or a shared cos/sin table;
//  * flat kernels (everything else): a grid-stride loop over all vectors of
//    all rows, so a single decode row still spreads over the whole GPU.
// Each kernel has a vector path (16-byte accesses, taken when every pointer
// is aligned and every row length and stride is a multiple of the vector) and
// a scalar path for the rest; the launcher picks one at run time.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "base/check.h"
#include "cuda/alignment.h"
#include "cuda/cuda_check.h"
#include "cuda/elementwise.h"
#include "cuda/pdl.h"
#include "cuda/row_reduce.cuh"

namespace specstack::cuda {
namespace {

constexpr int kFlatThreads = 256;
// Enough CTAs to fill every SM many times over; the grid-stride loops cover
// the rest, and the cap keeps the grid size within int range for n ~ 1e9.
constexpr int64_t kMaxFlatBlocks = 8192;
constexpr int kWarp = 32;

int flat_blocks(int64_t work) {
  return static_cast<int>(
      std::clamp<int64_t>((work + kFlatThreads - 1) / kFlatThreads, 1, kMaxFlatBlocks));
}

__device__ __forceinline__ int64_t flat_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t flat_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// W consecutive bf16 <-> f32: W = 8 moves one 16-byte uint4, W = 4 an 8-byte uint2,
// other W element by element.
template <int W>
__device__ __forceinline__ void load_bf16(const bf16* src, float (&out)[W]) {
  if constexpr (W == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(pairs[k]);
      out[2 * k] = f.x;
      out[2 * k + 1] = f.y;
    }
  } else if constexpr (W == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    const float2 f0 = __bfloat1622float2(pairs[0]), f1 = __bfloat1622float2(pairs[1]);
    out[0] = f0.x, out[1] = f0.y, out[2] = f1.x, out[3] = f1.y;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = __bfloat162float(src[k]);
  }
}

template <int W>
__device__ __forceinline__ void store_bf16(bf16* dst, const float (&in)[W]) {
  if constexpr (W == 8) {
    uint4 raw;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; ++k) pairs[k] = __floats2bfloat162_rn(in[2 * k], in[2 * k + 1]);
    *reinterpret_cast<uint4*>(dst) = raw;
  } else if constexpr (W == 4) {
    uint2 raw;
    __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
    pairs[0] = __floats2bfloat162_rn(in[0], in[1]);
    pairs[1] = __floats2bfloat162_rn(in[2], in[3]);
    *reinterpret_cast<uint2*>(dst) = raw;
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) dst[k] = __float2bfloat16(in[k]);
  }
}

// W consecutive f32 (W a multiple of 4 uses float4 accesses).
template <int W>
__device__ __forceinline__ void load_f32(const float* src, float (&out)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 4) {
      const float4 f = *reinterpret_cast<const float4*>(src + k);
      out[k] = f.x;
      out[k + 1] = f.y;
      out[k + 2] = f.z;
      out[k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = src[k];
  }
}

template <int W>
__device__ __forceinline__ void store_f32(float* dst, const float (&in)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int k = 0; k < W; k += 4) {
      *reinterpret_cast<float4*>(dst + k) = make_float4(in[k], in[k + 1], in[k + 2], in[k + 3]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) dst[k] = in[k];
  }
}

// Bit copy of W bf16 (no conversion, so gathers and KV writes are exact).
template <int W>
__device__ __forceinline__ void copy_bf16(const bf16* src, bf16* dst) {
  if constexpr (W == 8) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) dst[k] = src[k];
  }
}

// ---- embedding ---------------------------------------------------------------

template <int W>
__global__ void embedding_kernel(const bf16* table, const int32_t* ids, int32_t n, int32_t dim,
                                 float* out) {
  const int64_t per_row = dim / W;
  const int64_t total = static_cast<int64_t>(n) * per_row;
  for (int64_t v = flat_index(); v < total; v += flat_stride()) {
    const int64_t i = v / per_row;
    const int64_t c = (v - i * per_row) * W;
    float f[W];
    load_bf16<W>(table + static_cast<int64_t>(ids[i]) * dim + c, f);
    store_f32<W>(out + i * dim + c, f);
  }
}

// ---- rmsnorm / add_rmsnorm ---------------------------------------------------

// One CTA per output row i; thread t holds elements t * W + k * blockDim.x * W
// (k < kIters) of the row in registers. The norm weights are loaded before
// pdl_begin (no kernel of a step writes them: cuda/pdl.h), so a decode step's
// norm, a latency chain on one SM, starts from its row loads; the row stays
// in registers, so it is read once. Same per-thread order as a strided loop,
// so the sums are those of the two-pass version bit for bit.
template <int W, int kIters>
__device__ __forceinline__ void load_norm_weights(const float* w, int32_t dim,
                                                  float (&g)[kIters][W]) {
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * W;
    if (c < dim) load_f32<W>(w + c, g[k]);
  }
}

// y = bf16(g * (v * inv_rms)) for the held elements (HF's order).
template <int W, int kIters>
__device__ __forceinline__ void store_normed(bf16* yr, int32_t dim, float inv_rms,
                                             const float (&g)[kIters][W],
                                             const float (&v)[kIters][W]) {
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * W;
    if (c >= dim) continue;
    float out[W];
#pragma unroll
    for (int e = 0; e < W; ++e) out[e] = g[k][e] * (v[k][e] * inv_rms);
    store_bf16<W>(yr + c, out);
  }
}

// Input row r = row_ids ? row_ids[i] : i. W = 4: float4 loads of x and w,
// 8-byte stores of y.
template <int W, int kIters>
__global__ void rmsnorm_kernel(const float* x, const int32_t* row_ids, const float* w, float eps,
                               int32_t dim, bf16* y) {
  float g[kIters][W], v[kIters][W];
  load_norm_weights<W, kIters>(w, dim, g);
  pdl_begin();
  __shared__ float partials[kWarp];
  const int64_t i = blockIdx.x;
  const int64_t r = row_ids != nullptr ? row_ids[i] : i;
  const float* xr = x + r * dim;  // [dim]
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * W;
    if (c >= dim) continue;
    load_f32<W>(xr + c, v[k]);
#pragma unroll
    for (int e = 0; e < W; ++e) ss += v[k][e] * v[k][e];
  }
  const float total = block_sum(ss, partials);
  // 1 / sqrtf (IEEE, not rsqrtf) as the CPU computes it.
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  store_normed<W, kIters>(y + i * dim, dim, inv_rms, g, v);
}

// x[r] += delta[r] (written back), then y[r] = rmsnorm(x[r]) * w.
template <int W, int kIters>
__global__ void add_rmsnorm_kernel(float* x, const bf16* delta, const float* w, float eps,
                                   int32_t dim, bf16* y) {
  float g[kIters][W], v[kIters][W];
  load_norm_weights<W, kIters>(w, dim, g);
  pdl_begin();
  __shared__ float partials[kWarp];
  const int64_t r = blockIdx.x;
  float* xr = x + r * dim;           // [dim]
  const bf16* dr = delta + r * dim;  // [dim]
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kIters; ++k) {
    const int c = (threadIdx.x + k * blockDim.x) * W;
    if (c >= dim) continue;
    float d[W];
    load_f32<W>(xr + c, v[k]);
    load_bf16<W>(dr + c, d);
#pragma unroll
    for (int e = 0; e < W; ++e) {
      v[k][e] += d[e];
      ss += v[k][e] * v[k][e];
    }
    store_f32<W>(xr + c, v[k]);
  }
  const float total = block_sum(ss, partials);
  const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(dim) + eps);
  store_normed<W, kIters>(y + r * dim, dim, inv_rms, g, v);
}

// ---- head_rmsnorm ------------------------------------------------------------

constexpr int kHeadWarps = 8;  // heads per CTA, one warp each

template <int W>
__global__ void head_rmsnorm_kernel(bf16* x, int32_t n_tokens, int64_t ld, int32_t n_heads,
                                    int32_t head_dim, const float* w, float eps) {
  pdl_begin();
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kHeadWarps + threadIdx.x / kWarp;
  // Warp-uniform exit: the shuffles below always see 32 active lanes.
  if (row >= static_cast<int64_t>(n_tokens) * n_heads) return;
  const int64_t t = row / n_heads;
  const int64_t h = row - t * n_heads;
  bf16* xr = x + t * ld + h * head_dim;  // [head_dim]
  float ss = 0.0f;
  for (int c = lane * W; c < head_dim; c += kWarp * W) {
    float v[W];
    load_bf16<W>(xr + c, v);
#pragma unroll
    for (int k = 0; k < W; ++k) ss += v[k] * v[k];
  }
  ss = warp_sum(ss);
  const float inv_rms = 1.0f / sqrtf(ss / static_cast<float>(head_dim) + eps);
  for (int c = lane * W; c < head_dim; c += kWarp * W) {
    float v[W], g[W], out[W];
    load_bf16<W>(xr + c, v);
    load_f32<W>(w + c, g);
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = g[k] * (v[k] * inv_rms);
    store_bf16<W>(xr + c, out);
  }
}

// ---- rope --------------------------------------------------------------------

constexpr int kRopeThreads = 128;

// One CTA per token: the cos/sin of the token's half-dims go to shared memory
// once (sincosf of angles up to ~1e5 rad is the costly part), then every head
// rotates from the table. W = 2 moves bf16 pairs (dims j, j+1 of both halves).
template <int W>
__global__ void rope_kernel(bf16* x, int64_t ld, int32_t n_heads, int32_t head_dim,
                            const int32_t* positions, const float* inv_freq) {
  extern __shared__ float cos_sin[];  // [2 * half]: cos | sin
  const int half = head_dim / 2;
  const int64_t t = blockIdx.x;
  const float pos = static_cast<float>(positions[t]);
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float s, c;
    sincosf(pos * inv_freq[j], &s, &c);  // fp32 angle as torch; accurate sincos
    cos_sin[j] = c;
    cos_sin[half + j] = s;
  }
  __syncthreads();
  const int per_head = half / W;
  bf16* xt = x + t * ld;  // [n_heads * head_dim] (a row of stride ld)
  for (int p = threadIdx.x; p < n_heads * per_head; p += blockDim.x) {
    const int h = p / per_head;
    const int j = (p - h * per_head) * W;
    bf16* lo = xt + static_cast<int64_t>(h) * head_dim + j;
    bf16* hi = lo + half;
    float a[W], b[W], out_lo[W], out_hi[W];
    if constexpr (W == 2) {
      const float2 fa = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(lo));
      const float2 fb = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(hi));
      a[0] = fa.x, a[1] = fa.y, b[0] = fb.x, b[1] = fb.y;
    } else {
      a[0] = __bfloat162float(lo[0]);
      b[0] = __bfloat162float(hi[0]);
    }
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float c = cos_sin[j + k], s = cos_sin[half + j + k];
      // HF rotate_half: out = x * cos + cat(-x_hi, x_lo) * sin
      out_lo[k] = a[k] * c - b[k] * s;
      out_hi[k] = b[k] * c + a[k] * s;
    }
    if constexpr (W == 2) {
      *reinterpret_cast<__nv_bfloat162*>(lo) = __floats2bfloat162_rn(out_lo[0], out_lo[1]);
      *reinterpret_cast<__nv_bfloat162*>(hi) = __floats2bfloat162_rn(out_hi[0], out_hi[1]);
    } else {
      lo[0] = __float2bfloat16(out_lo[0]);
      hi[0] = __float2bfloat16(out_hi[0]);
    }
  }
}

// ---- flat kernels ------------------------------------------------------------

template <int W>
__global__ void add_bias_kernel(bf16* x, int32_t rows, int32_t cols, int64_t ld,
                                const float* bias) {
  const int64_t per_row = cols / W;
  const int64_t total = static_cast<int64_t>(rows) * per_row;
  for (int64_t v = flat_index(); v < total; v += flat_stride()) {
    const int64_t r = v / per_row;
    const int64_t c = (v - r * per_row) * W;
    float f[W], b[W];
    load_bf16<W>(x + r * ld + c, f);
    load_f32<W>(bias + c, b);
#pragma unroll
    for (int k = 0; k < W; ++k) f[k] += b[k];
    store_bf16<W>(x + r * ld + c, f);
  }
}

template <int W>
__global__ void silu_mul_kernel(const bf16* gate_up, int32_t rows, int32_t width, bf16* out) {
  const int64_t per_row = width / W;
  const int64_t total = static_cast<int64_t>(rows) * per_row;
  for (int64_t v = flat_index(); v < total; v += flat_stride()) {
    const int64_t r = v / per_row;
    const int64_t c = (v - r * per_row) * W;
    const bf16* gate = gate_up + r * 2 * width + c;  // gate_up[r, c]
    float g[W], u[W], o[W];
    load_bf16<W>(gate, g);
    load_bf16<W>(gate + width, u);  // gate_up[r, width + c]
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] = g[k] / (1.0f + expf(-g[k])) * u[k];
    store_bf16<W>(out + r * width + c, o);
  }
}

template <int W>
__global__ void write_kv_kernel(const bf16* k, const bf16* v, int64_t ld, int32_t n_tokens,
                                int32_t kv_width, const int32_t* slot_mapping,
                                const int32_t* positions, bf16* k_cache, bf16* v_cache,
                                int32_t* slot_positions) {
  const int64_t per_row = kv_width / W;
  const int64_t total = static_cast<int64_t>(n_tokens) * per_row;
  for (int64_t i = flat_index(); i < total; i += flat_stride()) {
    const int64_t t = i / per_row;
    const int64_t c = (i - t * per_row) * W;
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;  // a padding row
    copy_bf16<W>(k + t * ld + c, k_cache + slot * kv_width + c);
    copy_bf16<W>(v + t * ld + c, v_cache + slot * kv_width + c);
    if (c == 0) slot_positions[slot] = positions[t];
  }
}

// dst row i (stride ld_dst) = src row rows[i] (rows null: row i), stride
// ld_src: gather_rows and copy_rows.
template <int W>
__global__ void copy_rows_kernel(const bf16* src, int64_t ld_src, const int32_t* rows, int32_t n,
                                 int32_t cols, bf16* dst, int64_t ld_dst) {
  pdl_begin();
  const int64_t per_row = cols / W;
  const int64_t total = static_cast<int64_t>(n) * per_row;
  for (int64_t v = flat_index(); v < total; v += flat_stride()) {
    const int64_t i = v / per_row;
    const int64_t c = (v - i * per_row) * W;
    const int64_t r = rows != nullptr ? rows[i] : i;
    copy_bf16<W>(src + r * ld_src + c, dst + i * ld_dst + c);
  }
}

// Rows are distinct within a call, so each output element has one writer.
template <int W>
__global__ void scatter_add_weighted_kernel(const bf16* src, const int32_t* rows,
                                            const float* weights, int32_t n, int32_t cols,
                                            float* out) {
  const int64_t per_row = cols / W;
  const int64_t total = static_cast<int64_t>(n) * per_row;
  for (int64_t v = flat_index(); v < total; v += flat_stride()) {
    const int64_t i = v / per_row;
    const int64_t c = (v - i * per_row) * W;
    const float weight = weights[i];
    float s[W], o[W];
    float* dst = out + static_cast<int64_t>(rows[i]) * cols + c;
    load_bf16<W>(src + i * cols + c, s);
    load_f32<W>(dst, o);
#pragma unroll
    for (int k = 0; k < W; ++k) o[k] += weight * s[k];
    store_f32<W>(dst, o);
  }
}

__global__ void convert_to_bf16_kernel(const void* src, int src_dtype, int64_t n, bf16* dst) {
  for (int64_t i = flat_index(); i < n; i += flat_stride()) {
    float value;
    if (src_dtype == 0) {
      value = static_cast<const float*>(src)[i];
    } else if (src_dtype == 1) {
      dst[i] = static_cast<const bf16*>(src)[i];  // bit copy
      continue;
    } else {
      value = __half2float(static_cast<const __half*>(src)[i]);
    }
    dst[i] = __float2bfloat16(value);  // round to nearest even, as f32_to_bf16
  }
}

// DummySource's hash, element by element (model/weights.cpp). z >> 40 has 24
// bits, so float(z >> 40) * 2^-23 - 1 is exact and the only rounding is the
// final product, done with __fmul_rn so no contraction can change it.
__global__ void fill_dummy_bf16_kernel(bf16* dst, int64_t n, uint64_t stream_seed,
                                       float amplitude) {
  for (int64_t i = flat_index(); i < n; i += flat_stride()) {
    uint64_t z = stream_seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float unit = __fsub_rn(__fmul_rn(__ull2float_rn(z >> 40), 2.0f / 16777216.0f), 1.0f);
    dst[i] = __float2bfloat16_rn(__fmul_rn(amplitude, unit));
  }
}

}  // namespace

void embedding(const bf16* table, const int32_t* ids, int32_t n, int32_t dim, float* out,
               cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  const int64_t work = static_cast<int64_t>(n) * dim;
  if (dim % 8 == 0 && aligned(table, 16) && aligned(out, 16)) {
    embedding_kernel<8>
        <<<flat_blocks(work / 8), kFlatThreads, 0, stream>>>(table, ids, n, dim, out);
  } else {
    embedding_kernel<1><<<flat_blocks(work), kFlatThreads, 0, stream>>>(table, ids, n, dim, out);
  }
  SS_CUDA_CHECK_LAUNCH();
}

namespace {

// The norms' kernels for launch_norm (row_reduce.cuh).
template <int W, int kIters>
struct RmsnormKernel {
  static constexpr auto fn = rmsnorm_kernel<W, kIters>;
};
template <int W, int kIters>
struct AddRmsnormKernel {
  static constexpr auto fn = add_rmsnorm_kernel<W, kIters>;
};

}  // namespace

void rmsnorm(const float* x, const int32_t* row_ids, const float* w, float eps, int32_t rows,
             int32_t dim, bf16* y, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  if (dim % 4 == 0 && aligned(x, 16) && aligned(w, 16) && aligned(y, 8)) {
    launch_norm<4, RmsnormKernel>(rows, dim, stream, x, row_ids, w, eps, dim, y);
  } else {
    launch_norm<1, RmsnormKernel>(rows, dim, stream, x, row_ids, w, eps, dim, y);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void add_rmsnorm(float* x, const bf16* delta, const float* w, float eps, int32_t rows, int32_t dim,
                 bf16* y, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  if (dim % 4 == 0 && aligned(x, 16) && aligned(delta, 8) && aligned(w, 16) && aligned(y, 8)) {
    launch_norm<4, AddRmsnormKernel>(rows, dim, stream, x, delta, w, eps, dim, y);
  } else {
    launch_norm<1, AddRmsnormKernel>(rows, dim, stream, x, delta, w, eps, dim, y);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void head_rmsnorm(bf16* x, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t head_dim,
                  const float* w, float eps, cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0 || head_dim <= 0) return;
  const int64_t rows = static_cast<int64_t>(n_tokens) * n_heads;
  const int64_t blocks = (rows + kHeadWarps - 1) / kHeadWarps;
  SS_CHECK_LE(blocks, int64_t{INT32_MAX});
  if (head_dim % 8 == 0 && ld % 8 == 0 && aligned(x, 16) && aligned(w, 16)) {
    launch_pdl(head_rmsnorm_kernel<8>, static_cast<unsigned>(blocks), kHeadWarps * kWarp, 0, stream,
               true, x, n_tokens, ld, n_heads, head_dim, w, eps);
  } else {
    launch_pdl(head_rmsnorm_kernel<1>, static_cast<unsigned>(blocks), kHeadWarps * kWarp, 0, stream,
               true, x, n_tokens, ld, n_heads, head_dim, w, eps);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void rope(bf16* x, int32_t n_tokens, int64_t ld, int32_t n_heads, int32_t head_dim,
          const int32_t* positions, const float* inv_freq, cudaStream_t stream) {
  if (n_tokens <= 0 || n_heads <= 0) return;
  SS_CHECK(head_dim > 0 && head_dim % 2 == 0);
  const int half = head_dim / 2;
  const size_t smem = 2 * static_cast<size_t>(half) * sizeof(float);
  if (half % 2 == 0 && ld % 2 == 0 && aligned(x, 4)) {
    rope_kernel<2>
        <<<n_tokens, kRopeThreads, smem, stream>>>(x, ld, n_heads, head_dim, positions, inv_freq);
  } else {
    rope_kernel<1>
        <<<n_tokens, kRopeThreads, smem, stream>>>(x, ld, n_heads, head_dim, positions, inv_freq);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void add_bias(bf16* x, int32_t rows, int32_t cols, int64_t ld, const float* bias,
              cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t work = static_cast<int64_t>(rows) * cols;
  if (cols % 8 == 0 && ld % 8 == 0 && aligned(x, 16) && aligned(bias, 16)) {
    add_bias_kernel<8><<<flat_blocks(work / 8), kFlatThreads, 0, stream>>>(x, rows, cols, ld, bias);
  } else {
    add_bias_kernel<1><<<flat_blocks(work), kFlatThreads, 0, stream>>>(x, rows, cols, ld, bias);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void silu_mul(const bf16* gate_up, int32_t rows, int32_t width, bf16* out, cudaStream_t stream) {
  if (rows <= 0 || width <= 0) return;
  const int64_t work = static_cast<int64_t>(rows) * width;
  if (width % 8 == 0 && aligned(gate_up, 16) && aligned(out, 16)) {
    silu_mul_kernel<8>
        <<<flat_blocks(work / 8), kFlatThreads, 0, stream>>>(gate_up, rows, width, out);
  } else {
    silu_mul_kernel<1><<<flat_blocks(work), kFlatThreads, 0, stream>>>(gate_up, rows, width, out);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void write_kv(const bf16* k, const bf16* v, int64_t ld, int32_t n_tokens, int32_t kv_width,
              const int32_t* slot_mapping, const int32_t* positions, bf16* k_cache, bf16* v_cache,
              int32_t* slot_positions, cudaStream_t stream) {
  if (n_tokens <= 0 || kv_width <= 0) return;
  const int64_t work = static_cast<int64_t>(n_tokens) * kv_width;
  if (kv_width % 8 == 0 && ld % 8 == 0 && aligned(k, 16) && aligned(v, 16) &&
      aligned(k_cache, 16) && aligned(v_cache, 16)) {
    write_kv_kernel<8><<<flat_blocks(work / 8), kFlatThreads, 0, stream>>>(
        k, v, ld, n_tokens, kv_width, slot_mapping, positions, k_cache, v_cache, slot_positions);
  } else {
    write_kv_kernel<1><<<flat_blocks(work), kFlatThreads, 0, stream>>>(
        k, v, ld, n_tokens, kv_width, slot_mapping, positions, k_cache, v_cache, slot_positions);
  }
  SS_CUDA_CHECK_LAUNCH();
}

namespace {

void launch_copy_rows(const bf16* src, int64_t ld_src, const int32_t* rows, int32_t n, int32_t cols,
                      bf16* dst, int64_t ld_dst, cudaStream_t stream, bool pdl) {
  if (n <= 0 || cols <= 0) return;
  const int64_t work = static_cast<int64_t>(n) * cols;
  if (cols % 8 == 0 && ld_src % 8 == 0 && ld_dst % 8 == 0 && aligned(src, 16) && aligned(dst, 16)) {
    launch_pdl(copy_rows_kernel<8>, flat_blocks(work / 8), kFlatThreads, 0, stream, pdl, src,
               ld_src, rows, n, cols, dst, ld_dst);
  } else {
    launch_pdl(copy_rows_kernel<1>, flat_blocks(work), kFlatThreads, 0, stream, pdl, src, ld_src,
               rows, n, cols, dst, ld_dst);
  }
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace

void gather_rows(const bf16* src, int64_t ld_src, const int32_t* rows, int32_t n, int32_t cols,
                 bf16* dst, cudaStream_t stream, bool pdl) {
  launch_copy_rows(src, ld_src, rows, n, cols, dst, cols, stream, pdl);
}

void copy_rows(const bf16* src, int64_t ld_src, int32_t n, int32_t cols, bf16* dst, int64_t ld_dst,
               cudaStream_t stream) {
  launch_copy_rows(src, ld_src, nullptr, n, cols, dst, ld_dst, stream, /*pdl=*/true);
}

void scatter_add_weighted(const bf16* src, const int32_t* rows, const float* weights, int32_t n,
                          int32_t cols, float* out, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return;
  const int64_t work = static_cast<int64_t>(n) * cols;
  if (cols % 8 == 0 && aligned(src, 16) && aligned(out, 16)) {
    scatter_add_weighted_kernel<8>
        <<<flat_blocks(work / 8), kFlatThreads, 0, stream>>>(src, rows, weights, n, cols, out);
  } else {
    scatter_add_weighted_kernel<1>
        <<<flat_blocks(work), kFlatThreads, 0, stream>>>(src, rows, weights, n, cols, out);
  }
  SS_CUDA_CHECK_LAUNCH();
}

void convert_to_bf16(const void* src, int src_dtype, int64_t n, bf16* dst, cudaStream_t stream) {
  SS_CHECK(src_dtype >= 0 && src_dtype <= 2);
  if (n <= 0) return;
  convert_to_bf16_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(src, src_dtype, n, dst);
  SS_CUDA_CHECK_LAUNCH();
}

void fill_dummy_bf16(bf16* dst, int64_t n, uint64_t stream_seed, float amplitude,
                     cudaStream_t stream) {
  if (n <= 0) return;
  fill_dummy_bf16_kernel<<<flat_blocks(n), kFlatThreads, 0, stream>>>(dst, n, stream_seed,
                                                                      amplitude);
  SS_CUDA_CHECK_LAUNCH();
}

}  // namespace specstack::cuda

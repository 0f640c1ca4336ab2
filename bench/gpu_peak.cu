// gpu_peak: what this GPU can actually do, as the denominator for MFU and
// bandwidth-fraction numbers of the CUDA backend (bench/README-device.md).
//   build-cuda/bench/gpu_peak [--runs 20] [--gib 4]
// Measures, each the median of --runs timed runs (cudaEvents) after warm-up, on
// random (non-zero) data:
//   * bf16 GEMM through cublasGemmEx (bf16 in/out, fp32 compute) at 8192^3 and at
//     the linear-layer shapes of a 7B (Qwen2.5-7B) prefill of 8192 tokens;
//   * device-to-device cudaMemcpyAsync of a --gib GiB buffer (bytes read + written);
//   * a read-only sum kernel over the same buffer (16-byte loads).
// Prints a table, then `peak_bf16_tflops=`, `copy_tbps=`, `read_tbps=` lines for scripts.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// A failing call means the measurement is meaningless: report and stop.
#define PEAK_CUDA(expr)                                                \
  do {                                                                 \
    cudaError_t peak_err_ = (expr);                                    \
    if (peak_err_ != cudaSuccess) {                                    \
      std::fprintf(stderr, "gpu_peak: %s failed: %s (%s:%d)\n", #expr, \
                   cudaGetErrorString(peak_err_), __FILE__, __LINE__); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

#define PEAK_CUBLAS(expr)                                                            \
  do {                                                                               \
    cublasStatus_t peak_st_ = (expr);                                                \
    if (peak_st_ != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "gpu_peak: %s failed: cublas status %d (%s:%d)\n", #expr, \
                   static_cast<int>(peak_st_), __FILE__, __LINE__);                  \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

#define PEAK_LAUNCH() PEAK_CUDA(cudaGetLastError())

constexpr int kThreads = 256;
constexpr int kWarmup = 5;

// splitmix64: a stateless per-index hash, so filling is one pass with no RNG state.
__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [-scale, scale), never exactly zero patterns (zeros make tensor cores
// look faster than they are: less switching power, higher clocks).
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i, float scale) {
  const uint64_t h = mix64(seed * 0x100000001B3ull + i);
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * scale;
}

// out: [n] bf16.
__global__ void fill_bf16_kernel(__nv_bfloat16* out, size_t n, uint64_t seed, float scale) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = __float2bfloat16(hash_uniform(seed, i, scale));
  }
}

// out: [n] f32.
__global__ void fill_f32_kernel(float* out, size_t n, uint64_t seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = hash_uniform(seed, i, 1.0f);
  }
}

__device__ __forceinline__ float sum4(float4 v) {
  return (v.x + v.y) + (v.z + v.w);
}

// Read-only bandwidth: every block sums a grid-stride share of `in` and writes one
// partial (so the loads cannot be optimised away). Four independent 16-byte loads per
// iteration keep enough bytes in flight to saturate HBM.
// in: [n4] float4, partial: [gridDim.x] f32.
__global__ void read_sum_kernel(const float4* __restrict__ in, size_t n4,
                                float* __restrict__ partial) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f, acc3 = 0.f;
  for (; i + 3 * stride < n4; i += 4 * stride) {
    const float4 a = __ldg(in + i);
    const float4 b = __ldg(in + i + stride);
    const float4 c = __ldg(in + i + 2 * stride);
    const float4 d = __ldg(in + i + 3 * stride);
    acc0 += sum4(a);
    acc1 += sum4(b);
    acc2 += sum4(c);
    acc3 += sum4(d);
  }
  for (; i < n4; i += stride) acc0 += sum4(__ldg(in + i));  // the tail, < 4 strides
  float acc = (acc0 + acc1) + (acc2 + acc3);

  // Block reduction: warp shuffles, then one value per warp through shared memory.
  for (int offset = 16; offset > 0; offset >>= 1) {
    acc += __shfl_down_sync(0xFFFFFFFFu, acc, offset);
  }
  __shared__ float warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    float v = lane < (blockDim.x >> 5) ? warp_sums[lane] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) {
      v += __shfl_down_sync(0xFFFFFFFFu, v, offset);
    }
    if (lane == 0) partial[blockIdx.x] = v;
  }
}

int fill_blocks(size_t n) {
  return static_cast<int>(std::min<size_t>((n + kThreads - 1) / kThreads, 65536));
}

void fill_bf16(__nv_bfloat16* p, size_t n, uint64_t seed, float scale, cudaStream_t stream) {
  fill_bf16_kernel<<<fill_blocks(n), kThreads, 0, stream>>>(p, n, seed, scale);
  PEAK_LAUNCH();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times `runs` calls of fn(run_index) after kWarmup untimed ones; one event pair per
// run so the median is over single launches. Returns the median in seconds.
template <typename Fn>
double time_median(cudaStream_t stream, int runs, Fn&& fn) {
  for (int w = 0; w < kWarmup; ++w) fn(w);
  std::vector<cudaEvent_t> start(static_cast<size_t>(runs)), stop(static_cast<size_t>(runs));
  for (int r = 0; r < runs; ++r) {
    PEAK_CUDA(cudaEventCreate(&start[r]));
    PEAK_CUDA(cudaEventCreate(&stop[r]));
  }
  for (int r = 0; r < runs; ++r) {
    PEAK_CUDA(cudaEventRecord(start[r], stream));
    fn(kWarmup + r);
    PEAK_CUDA(cudaEventRecord(stop[r], stream));
  }
  PEAK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> seconds;
  for (int r = 0; r < runs; ++r) {
    float ms = 0.f;
    PEAK_CUDA(cudaEventElapsedTime(&ms, start[r], stop[r]));
    seconds.push_back(ms * 1e-3);
    PEAK_CUDA(cudaEventDestroy(start[r]));
    PEAK_CUDA(cudaEventDestroy(stop[r]));
  }
  return median(seconds);
}

struct GemmShape {
  const char* name;
  int64_t m;  // tokens (rows of X and Y)
  int64_t n;  // output features (rows of W)
  int64_t k;  // input features
};

struct Row {
  std::string name;
  std::string shape;
  double seconds;
  double rate;  // TFLOP/s or TB/s
  const char* unit;
};

// One operand set of Y[m,n] = X[m,k] * W[n,k]^T, the engine's linear-layer layout.
struct GemmSet {
  __nv_bfloat16* x = nullptr;  // [m, k]
  __nv_bfloat16* w = nullptr;  // [n, k]
  __nv_bfloat16* y = nullptr;  // [m, n]
};

Row bench_gemm(cublasHandle_t handle, cudaStream_t stream, const GemmShape& s, int runs,
               size_t l2_bytes) {
  const size_t x_elems = static_cast<size_t>(s.m * s.k);
  const size_t w_elems = static_cast<size_t>(s.n * s.k);
  const size_t y_elems = static_cast<size_t>(s.m * s.n);
  const size_t set_bytes = (x_elems + w_elems + y_elems) * sizeof(__nv_bfloat16);
  // Rotate sets so one run cannot find the previous run's operands in L2: at least 3
  // sets spanning 4x L2 when a set is small; one set when it alone is twice L2.
  int n_sets = 1;
  if (set_bytes < 2 * l2_bytes) {
    n_sets = std::max<int>(3, static_cast<int>((4 * l2_bytes + set_bytes - 1) / set_bytes));
  }
  std::vector<GemmSet> sets(static_cast<size_t>(n_sets));
  for (int i = 0; i < n_sets; ++i) {
    PEAK_CUDA(cudaMalloc(&sets[i].x, x_elems * sizeof(__nv_bfloat16)));
    PEAK_CUDA(cudaMalloc(&sets[i].w, w_elems * sizeof(__nv_bfloat16)));
    PEAK_CUDA(cudaMalloc(&sets[i].y, y_elems * sizeof(__nv_bfloat16)));
    // Scales keep |y| around 1 (k terms of (1 * 0.02)-sized products), no inf/denormals.
    fill_bf16(sets[i].x, x_elems, 1000 + 3 * i, 1.0f, stream);
    fill_bf16(sets[i].w, w_elems, 1001 + 3 * i, 0.02f, stream);
    fill_bf16(sets[i].y, y_elems, 1002 + 3 * i, 1.0f, stream);
  }
  PEAK_CUDA(cudaStreamSynchronize(stream));

  const float alpha = 1.0f, beta = 0.0f;
  // cuBLAS is column-major: the row-major Y[m,n] is column-major Y^T [n,m], and
  // Y^T = W * X^T with W row-major [n,k] read as column-major [k,n] transposed ("TN").
  auto gemm = [&](int run) {
    const GemmSet& g = sets[static_cast<size_t>(run % n_sets)];
    PEAK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n),
                             static_cast<int>(s.m), static_cast<int>(s.k), &alpha, g.w, CUDA_R_16BF,
                             static_cast<int>(s.k), g.x, CUDA_R_16BF, static_cast<int>(s.k), &beta,
                             g.y, CUDA_R_16BF, static_cast<int>(s.n), CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
  };
  const double seconds = time_median(stream, runs, gemm);
  for (auto& g : sets) {
    PEAK_CUDA(cudaFree(g.x));
    PEAK_CUDA(cudaFree(g.w));
    PEAK_CUDA(cudaFree(g.y));
  }
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  char shape[96];
  std::snprintf(shape, sizeof(shape), "M=%lld N=%lld K=%lld sets=%d", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), n_sets);
  return Row{s.name, shape, seconds, flops / seconds * 1e-12, "TFLOP/s"};
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  double gib = 4.0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--gib") == 0 && i + 1 < argc) {
      gib = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--runs N (default 20)] [--gib G (default 4)]\n", argv[0]);
      return 2;
    }
  }
  if (gib <= 0.0) {
    std::fprintf(stderr, "gpu_peak: --gib must be positive\n");
    return 2;
  }

  int device = 0;
  PEAK_CUDA(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  PEAK_CUDA(cudaGetDeviceProperties(&prop, device));
  int mem_clock_khz = 0, bus_bits = 0;
  PEAK_CUDA(cudaDeviceGetAttribute(&mem_clock_khz, cudaDevAttrMemoryClockRate, device));
  PEAK_CUDA(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  // Double data rate: two transfers per memory clock.
  const double spec_tbps = 2.0 * mem_clock_khz * 1e3 * (bus_bits / 8.0) * 1e-12;
  const size_t l2_bytes = static_cast<size_t>(prop.l2CacheSize);
  std::printf("device: %s, %d SMs, L2 %.1f MiB, %.1f GiB, spec DRAM %.2f TB/s\n", prop.name,
              prop.multiProcessorCount, l2_bytes / 1048576.0, prop.totalGlobalMem / 1073741824.0,
              spec_tbps);

  cudaStream_t stream;
  PEAK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  PEAK_CUBLAS(cublasCreate(&handle));
  PEAK_CUBLAS(cublasSetStream(handle, stream));

  std::vector<Row> rows;
  // 7B prefill (Qwen2.5-7B, 8192 tokens): square projections (q/o; k/v are smaller),
  // fused gate/up, down.
  const GemmShape shapes[] = {
      {"gemm_8192_cube", 8192, 8192, 8192},
      {"gemm_7b_proj", 8192, 3584, 3584},
      {"gemm_7b_gate_up", 8192, 37888, 3584},
      {"gemm_7b_down", 8192, 3584, 18944},
  };
  for (const GemmShape& s : shapes) rows.push_back(bench_gemm(handle, stream, s, runs, l2_bytes));

  // Bandwidth: the buffer must dwarf L2 (4 GiB vs ~50 MiB), so one set suffices.
  const size_t bytes = static_cast<size_t>(gib * 1073741824.0) / 16 * 16;  // whole float4s
  size_t free_bytes = 0, total_bytes = 0;
  PEAK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (2 * bytes + (64u << 20) > free_bytes) {
    std::fprintf(stderr, "gpu_peak: %.2f GiB x2 does not fit in %.2f GiB free\n", gib,
                 free_bytes / 1073741824.0);
    return 1;
  }
  float* src = nullptr;  // [bytes / 4] f32
  float* dst = nullptr;  // [bytes / 4] f32
  PEAK_CUDA(cudaMalloc(&src, bytes));
  PEAK_CUDA(cudaMalloc(&dst, bytes));
  const size_t n_f32 = bytes / sizeof(float);
  fill_f32_kernel<<<fill_blocks(n_f32), kThreads, 0, stream>>>(src, n_f32, 7);
  PEAK_LAUNCH();
  fill_f32_kernel<<<fill_blocks(n_f32), kThreads, 0, stream>>>(dst, n_f32, 8);
  PEAK_LAUNCH();
  PEAK_CUDA(cudaStreamSynchronize(stream));

  char shape[64];
  std::snprintf(shape, sizeof(shape), "%.2f GiB", bytes / 1073741824.0);
  const double copy_s = time_median(stream, runs, [&](int) {
    PEAK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  rows.push_back(Row{"d2d_copy (r+w)", shape, copy_s, 2.0 * bytes / copy_s * 1e-12, "TB/s"});

  // Enough resident blocks to fill every SM; each thread then streams its share.
  int blocks_per_sm = 0;
  PEAK_CUDA(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, read_sum_kernel, kThreads, 0));
  const int read_blocks = std::max(1, blocks_per_sm) * prop.multiProcessorCount;
  float* partial = nullptr;  // [read_blocks] f32
  PEAK_CUDA(cudaMalloc(&partial, static_cast<size_t>(read_blocks) * sizeof(float)));
  const size_t n4 = bytes / sizeof(float4);
  const double read_s = time_median(stream, runs, [&](int) {
    read_sum_kernel<<<read_blocks, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(src), n4,
                                                          partial);
    PEAK_LAUNCH();
  });
  rows.push_back(Row{"read_sum (r)", shape, read_s, bytes / read_s * 1e-12, "TB/s"});
  // Consume the partials so the run is observably used (and a NaN would show a bug).
  std::vector<float> host_partial(static_cast<size_t>(read_blocks));
  PEAK_CUDA(cudaMemcpy(host_partial.data(), partial, host_partial.size() * sizeof(float),
                       cudaMemcpyDeviceToHost));
  double checksum = 0.0;
  for (float v : host_partial) checksum += v;

  PEAK_CUDA(cudaFree(partial));
  PEAK_CUDA(cudaFree(src));
  PEAK_CUDA(cudaFree(dst));
  PEAK_CUBLAS(cublasDestroy(handle));
  PEAK_CUDA(cudaStreamDestroy(stream));

  std::printf("\n%-18s %-34s %12s %12s\n", "measure", "shape", "median ms", "rate");
  double peak_tflops = 0.0;
  for (const Row& r : rows) {
    std::printf("%-18s %-34s %12.3f %8.1f %s\n", r.name.c_str(), r.shape.c_str(), r.seconds * 1e3,
                r.rate, r.unit);
    if (std::strcmp(r.unit, "TFLOP/s") == 0) peak_tflops = std::max(peak_tflops, r.rate);
  }
  std::printf("(median of %d runs after %d warm-ups; read checksum %.3g)\n\n", runs, kWarmup,
              checksum);
  for (const Row& r : rows) {
    if (std::strcmp(r.unit, "TFLOP/s") == 0) {
      std::printf("gemm name=%s tflops=%.1f\n", r.name.c_str(), r.rate);
    }
  }
  // The best GEMM rate is the MFU denominator; copy (r+w) is the decode-bandwidth one.
  std::printf("peak_bf16_tflops=%.1f\n", peak_tflops);
  std::printf("copy_tbps=%.3f\n", rows[rows.size() - 2].rate);
  std::printf("read_tbps=%.3f\n", rows.back().rate);
  std::printf("spec_dram_tbps=%.3f\n", spec_tbps);
  return 0;
}

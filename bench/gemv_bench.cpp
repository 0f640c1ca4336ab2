// gemv_bench: the decode GEMV (cuda/gemv.h) at the qwen2.5-7b and 0.5b
// shapes, for 1..8 input rows, and the tensor-core path's launch shapes
// (cuda/gemv_mma.h) side by side. Each point: random bf16 weights in as many
// copies as it takes to exceed the L2 (so every call streams from DRAM, as in
// a real step), 5 warm-up calls, then the median over 7 batches of 40 calls
// timed with CUDA events. Prints microseconds per call and the weight bytes
// per second; the one-row kernel's rate is the reference.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_data.h"
#include "bench_timing.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/gemv.h"
#include "cuda/gemv_mma.h"

using namespace specstack::cuda;

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
  bool silu;  // out = width; the weight has 2 * out rows
};

template <typename Call>
double time_us(int copies, Call call, cudaStream_t stream) {
  return specstack::bench::median_us_rotating(copies, call, 40, stream);
}

}  // namespace

int main() {
  const std::vector<Shape> shapes = {
      {"7b qkv", 4608, 3584, false},       {"7b o", 3584, 3584, false},
      {"7b gate_up", 18944, 3584, true},   {"7b down", 3584, 18944, false},
      {"0.5b qkv", 1152, 896, false},      {"0.5b o", 896, 896, false},
      {"0.5b gate_up", 4864, 896, true},   {"0.5b down", 896, 4864, false},
      {"7b lm_head", 152064, 3584, false}, {"0.5b lm_head", 152064, 896, false},
  };
  const std::vector<GemvMmaShape> variants = {{4, 4}, {8, 2}, {8, 4}, {16, 1}, {16, 2}, {16, 4}};
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937 rng(1);
  DeviceBuffer<__nv_bfloat16> x(size_t(8) * 18944), y(size_t(8) * 152064);
  specstack::bench::fill_random_bf16(x, rng);
  std::printf("| shape | rows | kernel | us | weight GB/s |\n|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    const int64_t w_rows = s.silu ? 2 * s.out : s.out;
    const size_t w_elems = size_t(w_rows) * s.in;
    const size_t bytes = w_elems * sizeof(__nv_bfloat16);
    const int copies = static_cast<int>(std::max<size_t>(3, (size_t(200) << 20) / bytes + 1));
    DeviceBuffer<__nv_bfloat16> w(w_elems * copies);
    DeviceBuffer<__nv_bfloat16> one(w_elems);
    specstack::bench::fill_random_bf16(one, rng);
    for (int c = 0; c < copies; ++c) {
      SS_CUDA_CHECK(
          cudaMemcpy(w.data() + c * w_elems, one.data(), bytes, cudaMemcpyDeviceToDevice));
    }
    auto report = [&](int64_t n, const char* kernel, double us) {
      std::printf("| %s | %lld | %s | %.2f | %.0f |\n", s.name, static_cast<long long>(n), kernel,
                  us, bytes / us / 1e3);
    };
    for (int64_t n : {1, 2, 5}) {
      const double us = time_us(
          copies,
          [&](int c) {
            const auto* wc = w.data() + c * w_elems;
            if (s.silu) {
              gemv_silu_mul(x.data(), s.in, wc, n, s.out, s.in, y.data(), stream);
            } else {
              gemv(x.data(), s.in, wc, n, s.out, s.in, y.data(), nullptr, s.out, stream);
            }
          },
          stream);
      report(n, "gemv (default)", us);
      if (n == 1) {
        for (int split : {1, 2, 4}) {
          const double sus = time_us(
              copies,
              [&](int c) {
                gemv_one_row(x.data(), w.data() + c * w_elems, s.out, s.in, y.data(), nullptr,
                             nullptr, s.silu, split, stream);
              },
              stream);
          char label[48];
          std::snprintf(label, sizeof(label), "one row split %d", split);
          report(n, label, sus);
        }
        continue;
      }
      for (const GemvMmaShape& v : variants) {
        const double vus = time_us(
            copies,
            [&](int c) {
              gemv_mma(x.data(), s.in, w.data() + c * w_elems, n, s.out, s.in, y.data(), nullptr,
                       s.out, nullptr, s.silu, stream, v);
            },
            stream);
        char label[48];
        std::snprintf(label, sizeof(label), "mma warps %d unroll %d", v.warps, v.unroll);
        report(n, label, vus);
      }
    }
  }
  SS_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}

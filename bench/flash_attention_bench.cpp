// flash_attention_bench: the prefill attention kernels alone (cuda/flash_attention.h): one
// run of N query rows of one sequence through `flash_attention`, on the Hopper (wgmma) path and
// on the FlashAttention-2 path (set_flash_attention_hopper_enabled switches them in one
// process), block size 16 on shuffled blocks, keys at slots 0 .. first_slot + N - 1 with
// position = slot. Per point: 2 warm-up calls, then the median of 6 timed calls (CUDA events),
// printed as TFLOP/s (4 x head_dim x visible (query, key) pairs x heads per second), and the
// largest relative difference between the two paths' outputs (max |a - b| / max |b|), which
// should stay at bf16 rounding (~1e-2) or the numbers mean nothing. Where the FP8 path
// (cuda/flash_attention_fp8.h: e4m3 operands quantized by the call itself, causal points only)
// runs, its TFLOP/s (the whole call, quantizing passes included; same FLOP count) and its
// largest relative difference from the FA2 output (e4m3 rounding: a few percent).
//   build/bench/flash_attention_bench [--points N:first_slot:window:heads:kv_heads:head_dim,...]
// The default points are the causal prefills of the goals (32 / 8 heads at head dim 128,
// 4K-32K, a 4096 sliding window, a late 2048-row chunk) and the drafts' head dim 64 shapes
// (llama-3.2-1b 32 / 8, qwen2.5-0.5b 14 / 2).
// --between-gemms: each call (warm-ups included) follows a bf16 GEMM of a 7B MLP's gate/up
// shape (8192 x 3584 by 37888, cuBLAS) with no idle gap, as attention runs inside a prefill
// step; only the attention is timed. Alone, calls run from an idle, cool GPU: the prefill
// GEMMs hold the H100 at its power limit, where clocks are lower.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string_view>
#include <vector>

#include "bench_points.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/flash_attention.h"
#include "cuda/flash_attention_fp8.h"
#include "cuda/flash_attention_hopper.h"

using namespace specstack::cuda;

namespace {

constexpr int32_t kBlock = 16;

struct Point {
  int32_t rows = 0, first_slot = 0, window = 0, heads = 32, kv_heads = 8, head_dim = 128;
};

std::vector<Point> default_points() {
  std::vector<Point> points;
  for (int32_t n : {4096, 8192, 16384, 32768}) points.push_back({n, 0, 0, 32, 8, 128});
  points.push_back({32768, 0, 4096, 32, 8, 128});  // sliding window
  points.push_back({2048, 30000, 0, 32, 8, 128});  // a late chunk
  for (int32_t n : {4096, 8192, 16384, 32768}) points.push_back({n, 0, 0, 32, 8, 64});
  for (int32_t n : {8192, 16384, 32768}) points.push_back({n, 0, 0, 14, 2, 64});
  points.push_back({32768, 0, 4096, 32, 8, 64});
  return points;
}

bool valid_point(const std::array<int32_t, 6>& f) {
  return f[0] > 0 && f[1] >= 0 && f[2] >= 0 && f[4] > 0 && f[3] % f[4] == 0 && f[5] > 0;
}

// bf16 in about [-1, 1) from a xorshift (the same stream for every point).
std::vector<__nv_bfloat16> random_bf16(size_t n, uint32_t& state) {
  std::vector<__nv_bfloat16> out(n);
  for (auto& x : out) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    x = __float2bfloat16(static_cast<float>(state >> 8) / float(1 << 23) - 1.0f);
  }
  return out;
}

// A bf16 GEMM y [8192, 37888] = x [8192, 3584] w^T on the default stream
// (--between-gemms), operands random as the attention's.
class HeatGemm {
 public:
  HeatGemm() : x_(size_t(kRows) * kIn), w_(size_t(kOut) * kIn), y_(size_t(kRows) * kOut) {
    uint32_t state = 999;
    x_.upload(random_bf16(x_.size(), state));
    w_.upload(random_bf16(w_.size(), state));
    if (cublasCreate(&handle_) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "flash_attention_bench: cublasCreate failed\n");
      std::exit(1);
    }
  }
  ~HeatGemm() { cublasDestroy(handle_); }
  HeatGemm(const HeatGemm&) = delete;
  HeatGemm& operator=(const HeatGemm&) = delete;
  void run() {
    const float alpha = 1.0f, beta = 0.0f;
    if (cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, kOut, kRows, kIn, &alpha, w_.data(),
                     CUDA_R_16BF, kIn, x_.data(), CUDA_R_16BF, kIn, &beta, y_.data(), CUDA_R_16BF,
                     kOut, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "flash_attention_bench: cublasGemmEx failed\n");
      std::exit(1);
    }
  }

 private:
  static constexpr int kRows = 8192, kIn = 3584, kOut = 37888;
  DeviceBuffer<__nv_bfloat16> x_, w_, y_;
  cublasHandle_t handle_ = nullptr;
};

double median_ms(const std::function<void()>& attend, HeatGemm* heat) {
  cudaEvent_t start, stop;
  SS_CUDA_CHECK(cudaEventCreate(&start));
  SS_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int it = 0; it < 8; ++it) {
    if (heat != nullptr) heat->run();
    SS_CUDA_CHECK(cudaEventRecord(start));
    attend();
    SS_CUDA_CHECK(cudaEventRecord(stop));
    SS_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    SS_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (it >= 2) ms.push_back(t);  // two warm-ups
  }
  SS_CUDA_CHECK(cudaEventDestroy(start));
  SS_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void run_point(const Point& p, HeatGemm* heat) {
  const int32_t n_rows = p.rows, hd = p.head_dim;
  const int32_t n_keys = p.first_slot + n_rows, n_blocks = (n_keys + kBlock - 1) / kBlock;
  std::mt19937 rng(7);
  // Block table [n_blocks] shuffled over the pool; slot_positions [n_blocks * 16].
  std::vector<int32_t> table(n_blocks), q_slot(n_rows), q_pos(n_rows);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<int32_t> slot_pos(static_cast<size_t>(n_blocks) * kBlock);
  for (int32_t j = 0; j < n_keys; ++j) slot_pos[table[j / kBlock] * kBlock + j % kBlock] = j;
  for (int32_t r = 0; r < n_rows; ++r) q_slot[r] = q_pos[r] = p.first_slot + r;
  uint32_t state = 12345;
  // q, out [n_rows][heads * hd]; k, v [n_blocks * 16][kv_heads * hd].
  DeviceBuffer<__nv_bfloat16> q(size_t(n_rows) * p.heads * hd), out(q.size());
  DeviceBuffer<__nv_bfloat16> k(size_t(n_blocks) * kBlock * p.kv_heads * hd), v(k.size());
  q.upload(random_bf16(q.size(), state));
  k.upload(random_bf16(k.size(), state));
  v.upload(random_bf16(v.size(), state));
  DeviceBuffer<int32_t> d_pos(slot_pos.size()), d_table(table.size()), d_slot(q_slot.size()),
      d_qpos(q_pos.size());
  d_pos.upload(slot_pos);
  d_table.upload(table);
  d_slot.upload(q_slot);
  d_qpos.upload(q_pos);
  FlashAttentionArgs a{q.data(),
                       int64_t{p.heads} * hd,
                       d_slot.data(),
                       d_qpos.data(),
                       n_rows,
                       k.data(),
                       v.data(),
                       d_pos.data(),
                       d_table.data(),
                       kBlock,
                       n_keys,
                       p.heads,
                       p.kv_heads,
                       hd,
                       1.0f / std::sqrt(float(hd)),
                       p.window,
                       out.data(),
                       int64_t{p.heads} * hd};
  double pairs = 0;
  for (int32_t r = 0; r < n_rows; ++r) {
    const int32_t lo = p.window > 0 ? std::max(0, q_pos[r] - p.window + 1) : 0;
    pairs += q_slot[r] + 1 - lo;
  }
  const double flops = 4.0 * hd * pairs * p.heads;
  double tflops[2] = {0, 0};
  std::vector<float> outs[2];
  const bool hopper = [&] {
    set_flash_attention_hopper_enabled(true);
    return flash_attention_hopper_supported(a);
  }();
  for (int path = hopper ? 0 : 1; path < 2; ++path) {
    set_flash_attention_hopper_enabled(path == 0);
    tflops[path] = flops / (median_ms([&] { flash_attention(a, nullptr); }, heat) * 1e-3) / 1e12;
    const std::vector<__nv_bfloat16> host = out.download();
    outs[path].resize(host.size());
    for (size_t i = 0; i < host.size(); ++i) outs[path][i] = __bfloat162float(host[i]);
  }
  set_flash_attention_hopper_enabled(true);
  char hopper_tflops[32] = "n/a", rel_diff[32] = "n/a";
  if (hopper) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < outs[1].size(); ++i) {
      diff = std::max(diff, double(std::fabs(outs[0][i] - outs[1][i])));
      scale = std::max(scale, double(std::fabs(outs[1][i])));
    }
    std::snprintf(hopper_tflops, sizeof(hopper_tflops), "%.1f", tflops[0]);
    std::snprintf(rel_diff, sizeof(rel_diff), "%.2g", diff / std::max(scale, 1e-30));
  }
  char fp8_tflops[32] = "n/a", fp8_diff[32] = "n/a";
  if (flash_attention_fp8_supported(a)) {
    const size_t bytes = flash_attention_fp8_workspace_bytes(a);
    DeviceBuffer<unsigned char> workspace(bytes);
    const double ms =
        median_ms([&] { flash_attention_fp8(a, workspace.data(), bytes, nullptr); }, heat);
    std::snprintf(fp8_tflops, sizeof(fp8_tflops), "%.1f", flops / (ms * 1e-3) / 1e12);
    const std::vector<__nv_bfloat16> host = out.download();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < host.size(); ++i) {
      diff = std::max(diff, double(std::fabs(__bfloat162float(host[i]) - outs[1][i])));
      scale = std::max(scale, double(std::fabs(outs[1][i])));
    }
    std::snprintf(fp8_diff, sizeof(fp8_diff), "%.2g", diff / std::max(scale, 1e-30));
  }
  std::printf("| %d | %d | %d | %d / %d | %d | %s | %.1f | %s | %s | %s |\n", n_rows, p.first_slot,
              p.window, p.heads, p.kv_heads, hd, hopper_tflops, tflops[1], rel_diff, fp8_tflops,
              fp8_diff);
}

}  // namespace

int main(int argc, char** argv) {
  constexpr const char* kForm = "N:first_slot:window:heads:kv_heads:head_dim";
  std::vector<Point> points = default_points();
  // --between-gemms is this program's own; the rest goes to points_option.
  std::vector<char*> args;
  bool between_gemms = false;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::string_view(argv[i]) == "--between-gemms") {
      between_gemms = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (const auto text = specstack::bench::points_option(
          static_cast<int>(args.size()), args.data(),
          "flash_attention_bench [--points N:first_slot:window:heads:kv_heads:head_dim,...] "
          "[--between-gemms]")) {
    points.clear();
    for (const auto& f :
         specstack::bench::parse_points<6>(*text, "flash_attention_bench", kForm, valid_point)) {
      points.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
    }
  }
  std::printf(
      "| rows | first slot | window | heads | head dim | Hopper TFLOP/s | FA2 TFLOP/s | max rel "
      "diff | FP8 TFLOP/s | FP8 max rel diff |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::unique_ptr<HeatGemm> heat = between_gemms ? std::make_unique<HeatGemm>() : nullptr;
  // ~0.3 s of GEMMs first: a prefill step's clocks settle only after tens of
  // ms at the power limit (a 7B 8K step's first ~12 layers ran faster).
  for (int i = 0; heat != nullptr && i < 100; ++i) heat->run();
  for (const Point& p : points) run_point(p, heat.get());
  return 0;
}

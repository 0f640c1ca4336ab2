// fp8_bench: the pieces of --quantization fp8 at the qwen2.5-7b shapes on the
// GPU, to place the GEMV / GEMM crossover and see where prefill time goes.
//   1. the one-row FP8 GEMV per shape and split (warps per output row)
//      (--gemv-only: this and the default one-row fp8 and bf16 GEMVs, nothing
//      else);
//   2. decode rows 1..8 and 16: FP8 GEMV vs quantize + FP8 GEMM (Gemm with
//      the crossover forced) vs the bf16 path, per call;
//   3. 8192 rows (prefill): bf16 cuBLAS vs the whole FP8 path, and its parts
//      (activation quantize, cuBLASLt FP8 GEMM with and without fast
//      accumulation, the scaling pass), and the GEMM with cuBLASLt's first
//      heuristic answer against the autotuned choice (fp8_gemm.h);
//   4. the prefill fusions (norm -> e4m3, the QKV scales in the rope kernel)
//      against the passes they replace, the rope kernel with the bias alone
//      (the bf16 path) and the SiLU + quantize pass of the gate/up product,
//      at 8 and 8192 rows (--fusions-only: this alone).
// Weights in enough copies to exceed the L2 (every call streams from DRAM);
// 5 warm-up calls, median of 7 batches of 20 calls timed with CUDA events.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench_data.h"
#include "bench_timing.h"
#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/elementwise.h"
#include "cuda/fp8_gemm.h"
#include "cuda/fp8_gemv.h"
#include "cuda/fp8_quantize.h"
#include "cuda/gemm.h"
#include "cuda/norm_quantize_fp8.h"
#include "cuda/rope_kv.h"

using namespace specstack::cuda;

namespace {

struct Shape {
  const char* name;
  int64_t out, in;
  bool silu;  // out = width; the weight has 2 * out rows
};

template <typename Call>
double time_us(int copies, Call call, cudaStream_t stream) {
  return specstack::bench::median_us_rotating(copies, call, 20, stream);
}

// One shape's weights in `copies` copies, bf16 and e4m3.
struct Weights {
  int copies = 1;
  int64_t rows = 0, in = 0;
  DeviceBuffer<__nv_bfloat16> w16;
  DeviceBuffer<fp8> w8;
  DeviceBuffer<float> scale;
  LinearWeight bf16(int c) const { return {w16.data() + c * rows * in, nullptr, nullptr}; }
  LinearWeight e4m3(int c) const {
    return {nullptr, w8.data() + c * rows * in, scale.data() + c * rows};
  }
};

Weights make_weights(const Shape& s, std::mt19937& rng, cudaStream_t stream) {
  Weights w;
  w.rows = s.silu ? 2 * s.out : s.out;
  w.in = s.in;
  const double bytes = double(w.rows) * double(w.in) * 2;
  w.copies = std::max(2, int(200e6 / bytes) + 1);
  w.w16.resize(size_t(w.copies * w.rows * w.in));
  specstack::bench::fill_random_bf16(w.w16, rng);
  w.w8.resize(w.w16.size());
  w.scale.resize(size_t(w.copies * w.rows));
  quantize_rows_fp8(w.w16.data(), w.in, w.copies * w.rows, w.in, w.w8.data(), w.scale.data(),
                    stream, false);
  return w;
}

// 4. The prefill fusions at qwen2.5-7b's shapes (hidden 3584, 28 + 2 x 4
// heads of 128), fused vs the passes they replace, at decode and prefill rows.
void bench_fusions(cudaStream_t stream, std::mt19937& rng) {
  constexpr int32_t kHidden = 3584, kHeads = 28, kKvHeads = 4, kHeadDim = 128;
  constexpr int64_t kWidth = int64_t{kHeads + 2 * kKvHeads} * kHeadDim;
  for (int32_t n : {8, 8192}) {
    const auto rows = static_cast<size_t>(n);
    DeviceBuffer<float> x{rows * kHidden}, w{size_t{kHidden}}, rs{rows}, cs{size_t{kWidth}},
        bias{size_t{kWidth}}, inv_freq{size_t{kHeadDim / 2}}, scale{rows};
    for (auto* b : {&x, &w, &rs, &cs, &bias, &inv_freq}) {
      std::vector<float> host(b->size());
      std::uniform_real_distribution<float> dist(0.01f, 1.0f);
      for (auto& v : host) v = dist(rng);
      b->upload(host);
    }
    DeviceBuffer<__nv_bfloat16> delta{rows * kHidden}, h{rows * kHidden}, qkv{rows * kWidth},
        k_cache{rows * kKvHeads * kHeadDim}, v_cache{rows * kKvHeads * kHeadDim};
    specstack::bench::fill_random_bf16(delta, rng);
    specstack::bench::fill_random_bf16(qkv, rng);
    DeviceBuffer<fp8> q{rows * kHidden};
    std::vector<int32_t> pos(rows);
    for (int32_t t = 0; t < n; ++t) pos[size_t(t)] = t;
    DeviceBuffer<int32_t> d_pos{rows}, slots{rows}, slot_pos{rows};
    d_pos.upload(pos);
    slots.upload(pos);
    auto us = [&](auto call) {
      return time_us(
          1, [&](int) { call(); }, stream);
    };
    const double norm_pair = us([&] {
      rmsnorm(x.data(), nullptr, w.data(), 1e-6f, n, kHidden, h.data(), stream);
      quantize_rows_fp8(h.data(), kHidden, n, kHidden, q.data(), scale.data(), stream);
    });
    const double norm_fused = us([&] {
      rmsnorm_quantize_fp8(x.data(), w.data(), 1e-6f, n, kHidden, q.data(), scale.data(), stream);
    });
    // add_rmsnorm accumulates into x every call; the values stay finite over the runs timed.
    const double add_pair = us([&] {
      add_rmsnorm(x.data(), delta.data(), w.data(), 1e-6f, n, kHidden, h.data(), stream);
      quantize_rows_fp8(h.data(), kHidden, n, kHidden, q.data(), scale.data(), stream);
    });
    const double add_fused = us([&] {
      add_rmsnorm_quantize_fp8(x.data(), delta.data(), Fp8Scales{}, w.data(), 1e-6f, n, kHidden,
                               q.data(), scale.data(), stream);
    });
    // The o / down output's scales: a scale_outer_bf16 pass first, or in the norm.
    const double add_scaled_pair = us([&] {
      scale_outer_bf16(delta.data(), kHidden, n, kHidden, rs.data(), w.data(), nullptr, stream);
      add_rmsnorm(x.data(), delta.data(), w.data(), 1e-6f, n, kHidden, h.data(), stream);
      quantize_rows_fp8(h.data(), kHidden, n, kHidden, q.data(), scale.data(), stream);
    });
    const double add_scaled_fused = us([&] {
      add_rmsnorm_quantize_fp8(x.data(), delta.data(), Fp8Scales{rs.data(), w.data()}, w.data(),
                               1e-6f, n, kHidden, q.data(), scale.data(), stream);
    });
    auto rope = [&](const QkvEpilogue& e) {
      rope_write_kv(qkv.data(), n, kWidth, kHeads, kKvHeads, kHeadDim, d_pos.data(),
                    inv_freq.data(), slots.data(), k_cache.data(), v_cache.data(), slot_pos.data(),
                    e, stream);
    };
    const double rope_pair = us([&] {
      scale_outer_bf16(qkv.data(), kWidth, n, kWidth, rs.data(), cs.data(), bias.data(), stream);
      rope(QkvEpilogue{});
    });
    const double rope_fused = us([&] { rope(QkvEpilogue{rs.data(), cs.data(), bias.data()}); });
    QkvEpilogue bias_only;
    bias_only.bias = bias.data();
    const double rope_bias = us([&] { rope(bias_only); });
    // The MLP's SiLU pass on the unscaled gate/up product (intermediate 18944),
    // with its scales, into the down GEMM's e4m3 rows.
    constexpr int64_t kInter = 18944;
    DeviceBuffer<__nv_bfloat16> gate_up{rows * 2 * kInter};
    specstack::bench::fill_random_bf16(gate_up, rng);
    DeviceBuffer<float> gu_scale{size_t{2 * kInter}};
    gu_scale.upload(std::vector<float>(size_t{2 * kInter}, 0.01f));
    DeviceBuffer<fp8> act8{rows * kInter};
    const double silu_quant = us([&] {
      silu_mul_quantize_fp8(gate_up.data(), n, kInter, rs.data(), gu_scale.data(), act8.data(),
                            scale.data(), stream);
    });
    std::printf(
        "| fusions | rmsnorm + quantize %.1f -> rmsnorm_quantize_fp8 %.1f; add_rmsnorm + quantize "
        "%.1f -> add_rmsnorm_quantize_fp8 %.1f; with the delta's scales %.1f -> %.1f; "
        "scale_outer_bf16 + rope_write_kv %.1f -> rope_write_kv with scales %.1f; rope_write_kv "
        "with the bias alone %.1f; silu_mul_quantize_fp8 %.1f (%.2f TB/s) | %d | us |\n",
        norm_pair, norm_fused, add_pair, add_fused, add_scaled_pair, add_scaled_fused, rope_pair,
        rope_fused, rope_bias, silu_quant, double(rows) * kInter * 5 / silu_quant / 1e6, n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // --gemv-only: section 1 and the one-row fp8 / bf16 GEMVs, nothing else.
  const bool gemv_only = argc > 1 && std::string(argv[1]) == "--gemv-only";
  cudaStream_t stream = nullptr;
  SS_CUDA_CHECK(cudaStreamCreate(&stream));
  std::mt19937 rng(1);
  // --fusions-only: section 4 alone.
  if (argc > 1 && std::string(argv[1]) == "--fusions-only") {
    bench_fusions(stream, rng);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    return 0;
  }
  const std::vector<Shape> shapes = {{"7b qkv", 4608, 3584, false},
                                     {"7b o", 3584, 3584, false},
                                     {"7b gate_up", 18944, 3584, true},
                                     {"7b down", 3584, 18944, false}};
  constexpr int64_t kPrefill = 8192;
  DeviceBuffer<__nv_bfloat16> x(size_t(kPrefill) * 18944), y(size_t(kPrefill) * 2 * 18944),
      act(size_t(kPrefill) * 18944);
  specstack::bench::fill_random_bf16(x, rng);
  Gemm gemm(stream);
  gemm.reserve_fp8_activations(kPrefill, 18944);
  DeviceBuffer<uint8_t> workspace(size_t(64) << 20);
  Fp8Gemm plain(stream, workspace.data(), workspace.nbytes(), Fp8GemmOptions{false});
  Fp8Gemm fast(stream, workspace.data(), workspace.nbytes(), Fp8GemmOptions{true});
  Fp8GemmOptions tune;  // the autotune over 8 heuristic answers (off by default)
  tune.autotune_candidates = 8;
  Fp8Gemm tuned(stream, workspace.data(), workspace.nbytes(), tune);
  Fp8Gemm tuned_scaled(stream, workspace.data(), workspace.nbytes(), tune);
  Fp8Gemm untuned_scaled(stream, workspace.data(), workspace.nbytes());
  DeviceBuffer<fp8> x8(size_t(kPrefill) * 18944);
  DeviceBuffer<float> x_scale{size_t(kPrefill)};

  std::printf("| shape | path | rows | us | weight GB/s or TFLOP/s |\n|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    Weights w = make_weights(s, rng, stream);
    const double w8_bytes = double(w.rows) * double(w.in);
    auto run = [&](const LinearWeight& weight, int64_t n) {
      if (s.silu) {
        gemm.gate_up_silu(x.data(), s.in, weight, n, s.out, s.in, y.data(), act.data());
      } else {
        gemm.linear(x.data(), s.in, weight, n, s.out, s.in, y.data(), s.out);
      }
    };
    // 1. One row, each split.
    for (int split : {1, 2, 4}) {
      const double us = time_us(
          w.copies,
          [&](int c) {
            fp8_gemv_one_row(x.data(), w.e4m3(c).w8, w.e4m3(c).scale, s.out, s.in, y.data(), s.silu,
                             split, stream);
          },
          stream);
      std::printf("| %s | fp8 gemv split %d | 1 | %.1f | %.0f |\n", s.name, split, us,
                  w8_bytes / us / 1e3);
    }
    // The bf16 GEMV at its default split (the weight rows' bytes at 2 a weight).
    if (gemv_only) {
      gemm.set_fp8_gemv_max_rows(kFp8GemvMaxRows);
      const double us8 = time_us(
          w.copies, [&](int c) { run(w.e4m3(c), 1); }, stream);
      const double us16 = time_us(
          w.copies, [&](int c) { run(w.bf16(c), 1); }, stream);
      std::printf(
          "| %s | decode 1 row: fp8 gemv (default) / bf16 gemv | 1 | %.1f / %.1f | %.0f / %.0f |\n",
          s.name, us8, us16, w8_bytes / us8 / 1e3, 2 * w8_bytes / us16 / 1e3);
      continue;
    }
    // 2. Decode rows: the GEMV, the GEMM path, bf16.
    for (int64_t n : {1, 2, 4, 8, 16}) {
      gemm.set_fp8_gemv_max_rows(kFp8GemvMaxRows);
      const double us_gemv = n <= kFp8GemvMaxRows
                                 ? time_us(
                                       w.copies, [&](int c) { run(w.e4m3(c), n); }, stream)
                                 : 0;
      gemm.set_fp8_gemv_max_rows(0);
      const double us_gemm = time_us(
          w.copies, [&](int c) { run(w.e4m3(c), n); }, stream);
      const double us_bf16 = time_us(
          w.copies, [&](int c) { run(w.bf16(c), n); }, stream);
      std::printf("| %s | decode fp8 gemv / fp8 gemm / bf16 | %lld | %.1f / %.1f / %.1f | - |\n",
                  s.name, static_cast<long long>(n), us_gemv, us_gemm, us_bf16);
    }
    // 3. Prefill rows.
    const double flops = 2.0 * kPrefill * double(w.rows) * double(w.in);
    gemm.set_fp8_gemv_max_rows(0);
    const double us_fp8 = time_us(
        w.copies, [&](int c) { run(w.e4m3(c), kPrefill); }, stream);
    const double us_bf16 = time_us(
        w.copies, [&](int c) { run(w.bf16(c), kPrefill); }, stream);
    const double us_quant = time_us(
        1,
        [&](int) {
          quantize_rows_fp8(x.data(), s.in, kPrefill, s.in, x8.data(), x_scale.data(), stream);
        },
        stream);
    const double us_plain = time_us(
        w.copies,
        [&](int c) {
          plain.matmul(x8.data(), x_scale.data(), w.e4m3(c).w8, w.e4m3(c).scale, kPrefill, w.rows,
                       s.in, y.data(), w.rows, true);
        },
        stream);
    const double us_tuned = time_us(
        w.copies,
        [&](int c) {
          tuned.matmul(x8.data(), x_scale.data(), w.e4m3(c).w8, w.e4m3(c).scale, kPrefill, w.rows,
                       s.in, y.data(), w.rows, true);
        },
        stream);
    auto scaled = [&](Fp8Gemm& g) {
      return time_us(
          w.copies,
          [&](int c) {
            g.matmul(x8.data(), x_scale.data(), w.e4m3(c).w8, w.e4m3(c).scale, kPrefill, w.rows,
                     s.in, y.data(), w.rows, false);
          },
          stream);
    };
    const Fp8Tuning tuning = tuned.last_tuning();
    const double us_scaled_untuned = scaled(untuned_scaled);
    const double us_scaled_tuned = scaled(tuned_scaled);
    const double us_fast = time_us(
        w.copies,
        [&](int c) {
          fast.matmul(x8.data(), x_scale.data(), w.e4m3(c).w8, w.e4m3(c).scale, kPrefill, w.rows,
                      s.in, y.data(), w.rows, true);
        },
        stream);
    const double us_scale = time_us(
        1,
        [&](int) {
          scale_outer_bf16(y.data(), w.rows, kPrefill, w.rows, x_scale.data(), w.scale.data(),
                           nullptr, stream);
        },
        stream);
    std::printf(
        "| %s | prefill bf16 %.1f us (%.0f TF) / fp8 path %.1f us (%.0f TF) | %lld | quantize "
        "%.1f, "
        "gemm %.1f (%.0f TF), fast-accum gemm %.1f (%.0f TF), scale pass %.1f | outer-vec %d (%s) "
        "|\n",
        s.name, us_bf16, flops / us_bf16 / 1e6, us_fp8, flops / us_fp8 / 1e6,
        static_cast<long long>(kPrefill), us_quant, us_plain, flops / us_plain / 1e6, us_fast,
        flops / us_fast / 1e6, us_scale, int(plain.last_used_outer_vector_scaling()),
        plain.outer_vector_status().c_str());
    std::printf(
        "| %s | prefill fp8 gemm autotune: unscaled first answer %.1f (%.0f TF) -> tuned %.1f "
        "(%.0f TF), candidate %d of %d (tuning saw %.1f -> %.1f); outer-vector scaled %.1f -> "
        "%.1f | %lld | - |\n",
        s.name, us_plain, flops / us_plain / 1e6, us_tuned, flops / us_tuned / 1e6, tuning.chosen,
        tuning.candidates, tuning.first_us, tuning.chosen_us, us_scaled_untuned, us_scaled_tuned,
        static_cast<long long>(kPrefill));
  }
  if (!gemv_only) bench_fusions(stream, rng);
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  return 0;
}

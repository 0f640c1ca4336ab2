// gpu_bench: prefill throughput / MFU and decode throughput of the CUDA
// backend on a dummy-weight model (a published config.json shape, seeded
// weights generated on the device).
//   build/bench/gpu_bench --config tests/data/configs/qwen2.5-7b.json
//       --prefill 2048,8192,16384,32768 --decode-batch 1,16,64,256
//       --peak-tflops 790 --copy-tbps 3.0
// FLOPs per prefill of L tokens (bench/README-device.md, same formula as the
// HF peer): 2 * body * L + 2 * head + 4 * n_layers * (L^2 / 2) * n_heads * head_dim,
// body = parameters outside the embedding and LM head (MoE: routed share).
// mfu counts those model FLOPs (as the HF peer's does); mfu_executed leaves
// out what the CUDA model skips: the last layer past its K/V projections for
// every row but the one that wants logits (o, MLP, attention of rows 0..L-2;
// cuda/cuda_model_internal.h StepMeta::tail_rows_only), unless
// SPECSTACK_LAST_LAYER_ALL_ROWS=1 or the last layer is MoE.
// Decode bandwidth fraction: (body + head) * 2 bytes * tok/s / copy bandwidth
// (--quantization fp8: body * 1 + head * 2 bytes; the LM head stays bf16).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "cuda/cuda_model.h"
#include "engine/generator.h"
#include "engine/model_instance.h"

namespace specstack {
namespace {

std::vector<int32_t> random_prompt(int32_t length, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Parameters outside embedding and head, per token (MoE: the routed top-k share).
double body_params(const ModelConfig& c) {
  const double h = double(c.hidden_size), q = double(c.n_heads * c.head_dim),
               kv = double(c.n_kv_heads * c.head_dim);
  double total = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    total += h * q * 2 + h * kv * 2;  // q, o, k, v
    if (c.layer_is_moe(l)) {
      total += double(c.moe.n_experts_per_token) * 3 * h * double(c.moe.expert_intermediate_size) +
               h * double(c.moe.n_experts);
    } else {
      total += 3 * h * double(c.intermediate_size);
    }
  }
  return total;
}

// FLOPs of a prefill of `length` that the last layer skips for rows
// 0..length-2 when it runs for the logit row alone (0 where it does not).
double skipped_last_layer_flops(const ModelConfig& c, int32_t length) {
  if (!last_layer_for_logit_rows_only() || c.layer_is_moe(c.n_layers - 1)) return 0;
  const double h = double(c.hidden_size), q = double(c.n_heads * c.head_dim);
  const double rows = double(length) - 1;
  const double linear = h * q + 3 * h * double(c.intermediate_size);  // o, gate, up, down
  return 2 * linear * rows + 4.0 * (rows * double(length) / 2) * q;
}

}  // namespace
}  // namespace specstack

int main(int argc, char** argv) {
  using namespace specstack;
  std::string config = "tests/data/configs/qwen2.5-7b.json";
  std::vector<int32_t> prefill = {2048, 8192, 16384, 32768};
  std::vector<int32_t> batches = {1, 16, 64, 256};
  int32_t decode_context = 512, decode_steps = 64;
  int repeats = 3;
  double peak_tflops = 0, copy_tbps = 0, memory_fraction = 0.9;
  bool no_graphs = false;
  std::string quantization = "none";
  CLI::App app{"specstack GPU benchmark: prefill MFU and decode throughput on dummy weights"};
  app.add_option("--config", config, "HF config.json");
  app.add_option("--prefill", prefill, "prefill lengths (one step each)")->delimiter(',');
  app.add_option("--decode-batch", batches, "decode batch sizes")->delimiter(',');
  app.add_option("--decode-context", decode_context, "prompt tokens before decoding");
  app.add_option("--decode-steps", decode_steps, "decode steps timed");
  app.add_option("--repeats", repeats, "timed repeats (median)");
  app.add_option("--peak-tflops", peak_tflops, "measured bf16 GEMM peak (gpu_peak) for MFU");
  app.add_option("--copy-tbps", copy_tbps, "measured copy bandwidth (gpu_peak) for decode");
  app.add_option("--gpu-memory-fraction", memory_fraction, "share of GPU memory to use");
  app.add_flag("--no-cuda-graphs", no_graphs, "decode eagerly");
  app.add_option("--quantization", quantization, "none or fp8 (e4m3 linear layers)")
      ->check(CLI::IsMember({"none", "fp8"}));
  CLI11_PARSE(app, argc, argv);

  CpuBackend unused(CpuBackendOptions{1});
  ModelInstanceOptions options;
  options.config_path = config;
  options.dummy_weights = true;
  options.dtype_override = "bf16";
  options.device = Device::kCuda;
  options.gpu_memory_fraction = memory_fraction;
  options.cuda_graphs = !no_graphs;
  options.quantization =
      quantization == "fp8" ? WeightQuantization::kFp8 : WeightQuantization::kNone;
  const int32_t max_prefill = *std::max_element(prefill.begin(), prefill.end());
  const int32_t max_batch = *std::max_element(batches.begin(), batches.end());
  options.kv_tokens = 0;  // the memory fraction sizes the pool
  options.max_tokens_per_step = std::max(max_prefill, 8192);
  options.graph_max_context = decode_context + decode_steps + 64;
  auto instance = ModelInstance::create(options, unused);
  if (!instance.ok()) return std::fprintf(stderr, "gpu_bench: %s\n", instance.message().c_str()), 1;
  ModelInstance& model = **instance;
  const ModelConfig& c = model.config();
  const double body = body_params(c);
  const double head = double(c.vocab_size) * double(c.hidden_size);
  const int64_t kv_capacity = model.pool().n_blocks() * model.kv().shape().block_size;
  std::fprintf(stderr, "gpu_bench: %s weights %.2f GiB, KV %lld tokens\n", config.c_str(),
               model.model().weight_bytes() / 1073741824.0, static_cast<long long>(kv_capacity));
  if (int64_t(max_batch) * (decode_context + decode_steps + 32) > kv_capacity) {
    std::fprintf(stderr, "gpu_bench: warning: KV pool smaller than the largest decode batch\n");
  }

  std::printf("| benchmark | tokens | seconds (median) | tok/s | TFLOP/s | MFU / bw frac |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int32_t length : prefill) {
    GeneratorOptions go;
    go.max_batched_tokens = length;  // one step, like an HF forward of the whole prompt
    Generator generator(model.runner(), model.kv_manager(), go);
    std::vector<double> times;
    bool failed = false;
    for (int r = 0; r <= repeats; ++r) {
      GenerationRequest request;
      request.prompt = random_prompt(length, c.vocab_size, 11 + r);
      request.params.temperature = 0;
      request.params.max_tokens = 1;
      GenerationStats stats;
      auto result = generator.generate({request}, {}, &stats);
      if (!result.ok()) {
        std::fprintf(stderr, "gpu_bench: prefill %d: %s\n", length, result.message().c_str());
        failed = true;
        break;
      }
      if (r > 0) times.push_back(stats.prefill_seconds);
    }
    if (failed) continue;
    const double t = median(times);
    const double flops =
        2 * body * length + 2 * head +
        4.0 * double(c.n_layers) * (double(length) * length / 2) * double(c.n_heads * c.head_dim);
    const double tflops = flops / t / 1e12;
    const double mfu = peak_tflops > 0 ? tflops / peak_tflops : 0;
    const double executed_tflops = (flops - skipped_last_layer_flops(c, length)) / t / 1e12;
    const double mfu_executed = peak_tflops > 0 ? executed_tflops / peak_tflops : 0;
    std::printf("| prefill %d | %d | %.4f | %.0f | %.1f | %.3f (executed %.3f) |\n", length, length,
                t, length / t, tflops, mfu, mfu_executed);
    std::printf("ss prefill L=%d seconds=%.5f tflops=%.1f mfu=%.4f mfu_executed=%.4f\n", length, t,
                tflops, mfu, mfu_executed);
  }
  for (int32_t batch : batches) {
    GeneratorOptions go;
    go.max_batched_tokens = 8192;
    Generator generator(model.runner(), model.kv_manager(), go);
    std::vector<double> times;
    bool failed = false;
    for (int r = 0; r <= std::min(repeats, 2); ++r) {
      std::vector<GenerationRequest> requests(static_cast<size_t>(batch));
      for (int32_t b = 0; b < batch; ++b) {
        requests[size_t(b)].prompt = random_prompt(decode_context, c.vocab_size, 100 + b + 7 * r);
        requests[size_t(b)].params.temperature = 0;
        requests[size_t(b)].params.ignore_eos = true;
        requests[size_t(b)].params.max_tokens = decode_steps + 1;
      }
      GenerationStats stats;
      auto result = generator.generate(requests, {}, &stats);
      if (!result.ok()) {
        std::fprintf(stderr, "gpu_bench: decode %d: %s\n", batch, result.message().c_str());
        failed = true;
        break;
      }
      if (r > 0) times.push_back(stats.decode_seconds);
    }
    if (failed) continue;
    const double t = median(times);
    const double tokens = double(batch) * decode_steps;
    const double tok_s = tokens / t;
    const double step_bytes = body * (quantization == "fp8" ? 1 : 2) + head * 2;
    const double bw = copy_tbps > 0 ? step_bytes * (tok_s / batch) / (copy_tbps * 1e12) : 0;
    std::printf("| decode batch %d | %.0f | %.4f | %.1f | - | %.3f |\n", batch, tokens, t, tok_s,
                batch == 1 ? bw : 0.0);
    std::printf("ss decode batch=%d tok_s=%.1f bw_frac=%.4f\n", batch, tok_s,
                batch == 1 ? bw : 0.0);
    // SPECSTACK_ONE_LAUNCH_DECODE=all-timeline: where a one-launch step's time goes.
    const auto* cuda_model = dynamic_cast<const cuda::CudaModel*>(&model.model());
    const std::vector<double> phases =
        cuda_model != nullptr ? cuda_model->one_launch_phase_us() : std::vector<double>{};
    if (batch == 1 && !phases.empty()) {
      // span (slowest CTA's work / median work / barrier release after the last arrival)
      std::printf("ss one_launch us a layer:");
      const char* names = "ABCEF";
      for (int p = 0; p < 5; ++p) {
        std::printf(" %c %.2f (%.2f/%.2f/%.2f)", names[p], phases[4 * p], phases[4 * p + 1],
                    phases[4 * p + 2], phases[4 * p + 3]);
      }
      std::printf("\n");
    }
  }
  return 0;
}

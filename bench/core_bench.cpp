// core_bench: prefill and decode throughput of the CPU engine on a dummy-weight
// model (a published config.json shape with seeded random weights), or on a
// model folder / GGUF file with --model (GGUF quantized matrices run on the
// quantized kernels).
//   build/bench/core_bench --config tests/data/configs/qwen2.5-0.5b.json --dtype bf16
//   build/bench/core_bench --model model.q4_k_m.gguf -t 2
// Prints a table (median of --repeats after one warm-up) and writes a CSV.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant_kernels.h"
#include "engine/generator.h"
#include "engine/model_instance.h"

namespace specstack {
namespace {

struct BenchFlags {
  std::string config = "tests/data/configs/qwen2.5-0.5b.json";
  std::string dtype = "bf16";
  std::string model;  // a model folder or GGUF file instead of dummy weights
  std::vector<int32_t> prefill_lengths = {512, 2048};
  std::vector<int32_t> decode_batches = {1, 8};
  int32_t decode_context = 128;
  int32_t decode_steps = 32;
  int repeats = 3;
  // The untimed warm-up run's prompt length / decode steps at most (0: as the
  // timed runs). It faults the weights in and sizes the buffers either way;
  // a short one saves device time when every second of a call counts.
  int32_t warmup_tokens = 0;
  int threads = 0;
  std::string csv = "core_bench.csv";
  std::string quantization;      // "", q8_0 or q4_k: quantize at load (CPU int8 kernels)
  std::string kv_dtype = "f32";  // KV cache element type (specstack --kv-dtype)
};

// Resident set size now (not the peak): after --quantization the source
// weights are freed, and this is what the quantized model keeps.
double resident_mib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<double>(resident) * 4096.0 / 1048576.0;
}

std::vector<int32_t> random_prompt(int32_t length, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(3, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = pick(rng);
  return ids;
}

void accumulate(OpProfile& into, const OpProfile& from) {
  for (size_t i = 0; i < static_cast<size_t>(BackendOp::kOpCount); ++i) {
    into.seconds[i] += from.seconds[i];
    into.calls[i] += from.calls[i];
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Row {
  std::string name;
  int64_t tokens;
  double seconds;
  double tokens_per_second;
  OpProfile profile;  // summed over the timed repeats
};

}  // namespace
}  // namespace specstack

int main(int argc, char** argv) {
  using namespace specstack;
  BenchFlags flags;
  CLI::App app{"specstack core benchmark (prefill and decode tok/s on dummy weights)"};
  app.add_option("--config", flags.config, "HF config.json");
  app.add_option("--dtype", flags.dtype, "weight dtype: f32, bf16, f16");
  app.add_option("--model", flags.model, "model folder or GGUF file (instead of dummy weights)");
  app.add_option("--prefill", flags.prefill_lengths, "prefill lengths (0: none)")->delimiter(',');
  app.add_option("--decode-batch", flags.decode_batches, "decode batch sizes (0: none)")
      ->delimiter(',');
  app.add_option("--decode-context", flags.decode_context, "prompt length before decoding");
  app.add_option("--decode-steps", flags.decode_steps, "decode steps timed");
  app.add_option("--repeats", flags.repeats, "timed repeats (median reported)");
  app.add_option("--warmup-tokens", flags.warmup_tokens,
                 "cap on the warm-up run's prompt length and decode steps (0: none)");
  app.add_option("-t,--threads", flags.threads, "CPU threads (default: all)");
  app.add_option("--csv", flags.csv, "CSV output path");
  app.add_option("--quantization", flags.quantization,
                 "q8_0 or q4_k: quantize the weights at load (as specstack --quantization)");
  app.add_option("--kv-dtype", flags.kv_dtype, "KV cache element type: f32, bf16 or f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  CLI11_PARSE(app, argc, argv);

  CpuBackend backend(CpuBackendOptions{flags.threads});
  ModelInstanceOptions options;
  if (flags.model.empty()) {
    options.config_path = flags.config;
    options.dummy_weights = true;
    options.dtype_override = flags.dtype;
  } else {
    options.model_dir = flags.model;
  }
  int32_t max_batch = *std::max_element(flags.decode_batches.begin(), flags.decode_batches.end());
  int32_t max_prefill =
      *std::max_element(flags.prefill_lengths.begin(), flags.prefill_lengths.end());
  options.kv_tokens = std::max<int64_t>(
      max_prefill + 64, max_batch * (flags.decode_context + flags.decode_steps + 32));
  auto quantization = parse_weight_quantization(flags.quantization);
  if (!quantization.ok()) {
    std::fprintf(stderr, "core_bench: %s\n", quantization.message().c_str());
    return 1;
  }
  options.quantization = *quantization;
  options.kv_dtype = flags.kv_dtype == "bf16"  ? DType::kBF16
                     : flags.kv_dtype == "f16" ? DType::kF16
                                               : DType::kF32;
  auto instance = ModelInstance::create(options, backend);
  if (!instance.ok()) {
    std::fprintf(stderr, "core_bench: %s\n", instance.message().c_str());
    return 1;
  }
  ModelInstance& model = **instance;
  const int64_t vocab = model.config().vocab_size;
  if (!model.load_note().empty())
    std::fprintf(stderr, "core_bench: %s\n", model.load_note().c_str());
  std::fprintf(
      stderr,
      "core_bench: %s %s%s%s weights %.0f MiB, RSS after load %.0f MiB, %d threads, KV %s %.0f "
      "KiB/token, quantized kernels %s x%d\n",
      flags.model.empty() ? flags.config.c_str() : flags.model.c_str(),
      flags.model.empty() ? flags.dtype.c_str() : "stored",
      flags.quantization.empty() ? "" : " quantized ", flags.quantization.c_str(),
      model.model().weight_bytes() / 1048576.0, resident_mib(), backend.pool().n_threads(),
      dtype_name(model.kv().shape().dtype),
      static_cast<double>(KvCache::bytes_per_block(model.kv().shape())) /
          static_cast<double>(model.kv().shape().block_size) / 1024.0,
      cpu::isa_name(cpu::quant_best_isa()), cpu::quant_rows_per_pass());

  std::vector<Row> rows;
  GeneratorOptions generator_options;
  generator_options.max_batched_tokens = 4096;
  Generator generator(model.runner(), model.kv_manager(), generator_options);
  backend.set_profiling(true);
  auto warmup_cap = [&](int r, int32_t n) {
    return r == 0 && flags.warmup_tokens > 0 ? std::min(n, flags.warmup_tokens) : n;
  };
  for (int32_t length : flags.prefill_lengths) {
    if (length <= 0) continue;
    std::vector<double> times;
    OpProfile profile;
    for (int r = 0; r <= flags.repeats; ++r) {
      GenerationRequest request;
      request.prompt = random_prompt(warmup_cap(r, length), vocab, 11 + r);
      request.params.temperature = 0;
      request.params.max_tokens = 1;
      GenerationStats stats;
      backend.profile().reset();
      auto result = generator.generate({request}, {}, &stats);
      if (!result.ok()) return std::fprintf(stderr, "%s\n", result.message().c_str()), 1;
      if (r > 0) {  // r == 0 is the warm-up
        times.push_back(stats.prefill_seconds);
        accumulate(profile, backend.profile());
      }
    }
    double t = median(times);
    rows.push_back({fmt::format("prefill {}", length), length, t, length / t, profile});
  }
  for (int32_t batch : flags.decode_batches) {
    if (batch <= 0) continue;
    std::vector<double> times;
    OpProfile profile;
    for (int r = 0; r <= flags.repeats; ++r) {
      std::vector<GenerationRequest> requests(static_cast<size_t>(batch));
      for (int32_t b = 0; b < batch; ++b) {
        requests[b].prompt = random_prompt(flags.decode_context, vocab, 100 + b + 7 * r);
        requests[b].params.temperature = 0;
        requests[b].params.ignore_eos = true;
        requests[b].params.max_tokens = warmup_cap(r, flags.decode_steps) + 1;
      }
      GenerationStats stats;
      backend.profile().reset();
      auto result = generator.generate(requests, {}, &stats);
      if (!result.ok()) return std::fprintf(stderr, "%s\n", result.message().c_str()), 1;
      if (r > 0) {
        times.push_back(stats.decode_seconds);
        accumulate(profile, backend.profile());  // includes the prefill of the context
      }
    }
    double t = median(times);
    int64_t tokens = static_cast<int64_t>(batch) * flags.decode_steps;
    rows.push_back({fmt::format("decode batch {}", batch), tokens, t, tokens / t, profile});
  }

  std::ofstream csv(flags.csv);
  csv << "benchmark,tokens,seconds,tokens_per_second\n";
  std::printf("| benchmark | tokens | seconds (median) | tok/s |\n|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::printf("| %s | %lld | %.4f | %.1f |\n", row.name.c_str(),
                static_cast<long long>(row.tokens), row.seconds, row.tokens_per_second);
    csv << row.name << "," << row.tokens << "," << row.seconds << "," << row.tokens_per_second
        << "\n";
  }
  // Where the time goes: share of op time per benchmark (decode rows include
  // the prefill of their context, which the step timing excludes).
  std::printf("\n| benchmark |");
  for (size_t i = 0; i < static_cast<size_t>(BackendOp::kOpCount); ++i) {
    std::printf(" %s |", backend_op_name(static_cast<BackendOp>(i)));
  }
  std::printf("\n|---|");
  for (size_t i = 0; i < static_cast<size_t>(BackendOp::kOpCount); ++i) std::printf("---|");
  std::printf("\n");
  for (const Row& row : rows) {
    std::printf("| %s |", row.name.c_str());
    const double total = row.profile.total_seconds();
    for (size_t i = 0; i < static_cast<size_t>(BackendOp::kOpCount); ++i) {
      std::printf(" %.1f%% |", total > 0 ? 100.0 * row.profile.seconds[i] / total : 0.0);
    }
    std::printf("\n");
  }
  return 0;
}

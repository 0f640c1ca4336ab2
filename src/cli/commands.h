// The specstack subcommands. Each registers its flags on the CLI11 app and
// returns the process exit code when run.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/model_instance.h"

namespace specstack::cli {

// Flags shared by every command that loads a model.
struct ModelFlags {
  std::string model_dir;
  std::string config_path;
  bool dummy_weights = false;
  std::string dtype;
  int threads = 0;
  int64_t block_size = 16;
  std::string device = "cpu";
  double gpu_memory_fraction = 0.9;
  bool no_cuda_graphs = false;
  bool no_run_attention = false;
  std::string quantization;          // --quantization q8_0|q4_k|fp8 (target model only)
  int64_t tensor_parallel_size = 1;  // --tensor-parallel-size (target model only)
  std::string kv_dtype;  // --kv-dtype f32|bf16|f16 ("": the device's own; the draft's too)

  // The parsed --kv-dtype (unset: the device's own).
  Result<std::optional<DType>> kv_dtype_option() const;
  // The KV element type a host-memory plan sizes with: --kv-dtype or f32.
  DType host_kv_dtype() const;

  // Whether the target's matrices run on the CPU's int8 kernels: a GGUF file
  // or --quantization q8_0|q4_k, on --device cpu.
  bool cpu_quantized() const;

  void add_to(CLI::App& command);
  // Validates the combination and fills ModelInstanceOptions.
  Result<ModelInstanceOptions> instance_options(int64_t kv_tokens) const;
};

// Parses "1,2,3" into ids; errors name the bad element.
Result<std::vector<int32_t>> parse_int_list(const std::string& text, const std::string& flag);

// Prints "specstack: error: ..." to stderr and returns exit code 1.
int report_error(const std::string& message);

std::function<int()> add_generate_command(CLI::App& app);
std::function<int()> add_logits_command(CLI::App& app);
// `serve`: the OpenAI-compatible HTTP server.
std::function<int()> add_serve_command(CLI::App& app);
// `bench` groups the benchmark subcommands (bench serve, ...).
std::function<int()> add_bench_command(CLI::App& app);
// `eval needle|json|ppl`: speculative-prefill quality probes; `eval spec`:
// speculative decoding acceptance (registered on `eval` by the first).
std::function<int()> add_eval_command(CLI::App& app);
std::function<int()> add_eval_spec_command(CLI::App& eval);

}  // namespace specstack::cli

#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "gguf/gguf_file.h"

namespace specstack::cli {

bool ModelFlags::cpu_quantized() const {
  if (device != "cpu") return false;
  return quantization == "q8_0" || quantization == "q4_k" || gguf::is_gguf_file(model_dir);
}

void ModelFlags::add_to(CLI::App& command) {
  command.add_option(
      "-m,--model", model_dir,
      "HuggingFace model folder (config.json, *.safetensors, tokenizer.json) or a GGUF file");
  command.add_option("--config", config_path,
                     "config.json for --dummy-weights (default: the model folder's)");
  command.add_flag("--dummy-weights", dummy_weights,
                   "seeded random weights from the config, no weight files (benchmarks)");
  command.add_option("--dtype", dtype,
                     "dtype of dummy weights: f32, bf16 or f16 (default: config torch_dtype)");
  command.add_option("-t,--threads", threads, "CPU threads (default: all cores)");
  command.add_option("--block-size", block_size, "KV cache block size in tokens")
      ->check(CLI::Range(1, 1024));
  command.add_option("--device", device, "cpu or cuda (the CUDA backend, when built with nvcc)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  command
      .add_option("--gpu-memory-fraction", gpu_memory_fraction,
                  "with --device cuda: share of GPU memory for weights, activations and KV")
      ->check(CLI::Range(0.05, 1.0));
  command
      .add_option("--quantization", quantization,
                  "q8_0 or q4_k: quantize a safetensors model's matrices at load for the CPU's "
                  "int8 kernels (q4_k: llama.cpp's Q4_K_M mix, the LM head and attn_v / "
                  "ffn_down of half the layers at Q6_K; not the draft); fp8 (--device cuda, "
                  "Hopper): linear layers to e4m3 with per-channel scales")
      ->check(CLI::IsMember({"none", "q8_0", "q4_k", "fp8"}));
  command
      .add_option("--tensor-parallel-size", tensor_parallel_size,
                  "split the model over N ranks (heads, MLP, vocab); on the CPU the ranks are "
                  "threads sharing --threads: a correctness reference, not a speed-up")
      ->check(CLI::Range(1, 64));
  command
      .add_option("--kv-dtype", kv_dtype,
                  "KV cache element type: f32 (the CPU's default), bf16 or f16 (CPU: half the "
                  "KV memory and reads, values rounded to nearest even); --device cuda: bf16 "
                  "only. The draft's KV follows it")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  command.add_flag("--no-cuda-graphs", no_cuda_graphs,
                   "with --device cuda: run decode steps eagerly");
  command.add_flag(
      "--no-run-attention", no_run_attention,
      "with --device cuda: paged attention (verify and decode rows) uses the per-token kernel "
      "instead of the run kernel (for comparison)");
}

Result<ModelInstanceOptions> ModelFlags::instance_options(int64_t kv_tokens) const {
  if (model_dir.empty() && config_path.empty()) return make_error("--model is required");
  if (!dummy_weights && model_dir.empty())
    return make_error("--model is required (or --dummy-weights --config F)");
  ModelInstanceOptions options;
  options.model_dir = model_dir;
  options.config_path = config_path;
  options.dummy_weights = dummy_weights;
  options.dtype_override = dtype;
  options.block_size = block_size;
  options.kv_tokens = kv_tokens;
  options.device = device == "cuda" ? Device::kCuda : Device::kCpu;
  options.gpu_memory_fraction = gpu_memory_fraction;
  options.cuda_graphs = !no_cuda_graphs;
  options.run_attention = !no_run_attention;
  options.tensor_parallel_size = tensor_parallel_size;
  SS_ASSIGN_OR_RETURN(options.quantization, parse_weight_quantization(quantization));
  SS_ASSIGN_OR_RETURN(options.kv_dtype, kv_dtype_option());
  if (options.kv_dtype && options.device == Device::kCuda && *options.kv_dtype != DType::kBF16) {
    return errorf("--kv-dtype {}: the CUDA KV cache is bf16 (use --kv-dtype bf16 or leave it out)",
                  kv_dtype);
  }
  const bool fp8 = options.quantization == WeightQuantization::kFp8;
  if (options.quantization != WeightQuantization::kNone && !fp8 && options.device == Device::kCuda)
    return make_error("--quantization q8_0/q4_k run on the CPU only; with --device cuda use fp8");
  if (fp8 && options.device != Device::kCuda)
    return make_error("--quantization fp8 needs --device cuda (Hopper FP8 GEMMs)");
  return options;
}

Result<std::optional<DType>> ModelFlags::kv_dtype_option() const {
  if (kv_dtype.empty()) return std::optional<DType>();
  if (kv_dtype == "f32") return std::optional<DType>(DType::kF32);
  if (kv_dtype == "bf16") return std::optional<DType>(DType::kBF16);
  if (kv_dtype == "f16") return std::optional<DType>(DType::kF16);
  return errorf("--kv-dtype: unknown type '{}' (expected f32, bf16 or f16)", kv_dtype);
}

DType ModelFlags::host_kv_dtype() const {
  auto parsed = kv_dtype_option();
  return parsed.ok() && parsed.value() ? *parsed.value() : DType::kF32;
}

Result<std::vector<int32_t>> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int32_t> values;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      return errorf("{}: '{}' is not an integer", flag, item);
    }
    if (used != item.size() || value < INT32_MIN || value > INT32_MAX) {
      return errorf("{}: '{}' is not a 32-bit integer", flag, item);
    }
    values.push_back(static_cast<int32_t>(value));
  }
  if (values.empty()) return errorf("{}: empty list", flag);
  return values;
}

int report_error(const std::string& message) {
  std::fprintf(stderr, "specstack: error: %s\n", message.c_str());
  return 1;
}

}  // namespace specstack::cli

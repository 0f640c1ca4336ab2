#include "engine/model_instance.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "gguf/gguf_file.h"
#include "parallel/tensor_parallel_model.h"

#if SPECSTACK_HAVE_CUDA
#include "cuda/cuda_instance.h"
#endif

namespace specstack {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<std::unique_ptr<ModelInstance>> ModelInstance::create(const ModelInstanceOptions& options,
                                                             Backend& backend) {
  std::string config_path = options.config_path;
  if (config_path.empty()) {
    if (options.model_dir.empty()) return make_error("no model folder or config given");
    config_path = options.model_dir;
  }
  SS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(config_path));
  if (options.dtype_override == "f32")
    config.weight_dtype = DType::kF32;
  else if (options.dtype_override == "bf16")
    config.weight_dtype = DType::kBF16;
  else if (options.dtype_override == "f16")
    config.weight_dtype = DType::kF16;
  else if (!options.dtype_override.empty()) {
    return errorf("unknown dtype '{}' (expected f32, bf16 or f16)", options.dtype_override);
  }

  if (options.kv_dtype && !kv_dtype_supported(*options.kv_dtype)) {
    return errorf("--kv-dtype {}: the KV cache holds f32, bf16 or f16",
                  dtype_name(*options.kv_dtype));
  }
  if (options.block_size <= 0)
    return errorf("block size must be positive, got {}", options.block_size);
  if (options.tensor_parallel_size < 1) {
    return errorf("--tensor-parallel-size must be at least 1, got {}",
                  options.tensor_parallel_size);
  }
  if (options.tensor_parallel_size > 1 && options.device == Device::kCuda) {
    return make_error(
        "tensor parallelism on CUDA needs NCCL rank models: not built yet (issue 13)");
  }
  if (options.tensor_parallel_size > 1) {
    return create_tensor_parallel(std::move(config), options, backend);
  }
  if (options.device == Device::kCuda) {
    if (options.quantization != WeightQuantization::kNone &&
        options.quantization != WeightQuantization::kFp8) {
      return make_error(
          "--quantization q8_0/q4_k run on the CPU only (--device cuda takes --quantization fp8 "
          "or bf16 weights; GGUF files are dequantized there)");
    }
    if (options.kv_dtype && *options.kv_dtype != DType::kBF16) {
      return errorf(
          "--kv-dtype {}: the CUDA KV cache is bf16 (use --kv-dtype bf16 or leave it out)",
          dtype_name(*options.kv_dtype));
    }
    return create_on_gpu(std::move(config), options);
  }

  if (options.quantization == WeightQuantization::kFp8) {
    return make_error("--quantization fp8 runs on --device cuda only (Hopper FP8 GEMMs)");
  }
  const auto weights_start = std::chrono::steady_clock::now();
  ModelWeights weights;
  if (options.dummy_weights) {
    weights =
        make_dummy_weights(config, options.dummy_seed, options.on_progress, options.quantization);
  } else {
    if (options.model_dir.empty()) return make_error("no model folder given");
    WeightLoadOptions load;
    load.keep_quantized = !options.dequantize_gguf;
    load.quantization = options.quantization;
    SS_ASSIGN_OR_RETURN(weights,
                        load_weights(config, options.model_dir, options.on_progress, load));
  }
  std::string load_note = std::move(weights.load_note);
  // The CPU kernels' own layout (Q8_0 panels on either VNNI), once.
  if (auto* cpu = dynamic_cast<CpuBackend*>(&backend))
    lay_out_cpu_weights(weights, cpu->pool(), options.cpu_layout);

  std::unique_ptr<ModelInstance> instance(new ModelInstance());
  instance->model_ = std::make_unique<Transformer>(std::move(config), std::move(weights), backend);
  instance->startup_times_.weights_s = seconds_since(weights_start);
  instance->load_note_ = std::move(load_note);
  const auto kv_start = std::chrono::steady_clock::now();
  int64_t n_blocks = options.kv_blocks;
  if (n_blocks <= 0) n_blocks = (options.kv_tokens + options.block_size - 1) / options.block_size;
  KvCacheShape kv_shape = instance->model_->kv_shape(n_blocks, options.block_size);
  kv_shape.dtype = options.kv_dtype.value_or(DType::kF32);
  instance->kv_ = std::make_unique<KvCache>(kv_shape);
  instance->kv_manager_ = std::make_unique<KvManager>(*instance->kv_);
  instance->startup_times_.kv_reserve_s = seconds_since(kv_start);
  instance->runner_ =
      std::make_unique<ModelRunner>(*instance->model_, *instance->kv_, options.token_picking);
  return instance;
}

Result<std::unique_ptr<ModelInstance>> ModelInstance::create_tensor_parallel(
    ModelConfig config, const ModelInstanceOptions& options, Backend& backend) {
  const auto weights_start = std::chrono::steady_clock::now();
  std::unique_ptr<WeightSource> source;
  if (options.dummy_weights) {
    source = make_dummy_source(config.weight_dtype, options.dummy_seed);
  } else {
    if (options.model_dir.empty()) return make_error("no model folder given");
    if (gguf::is_gguf_file(options.model_dir)) {
      return make_error(
          "--tensor-parallel-size: GGUF files are not split yet; use a safetensors folder");
    }
    SS_ASSIGN_OR_RETURN(source, open_safetensors_source(options.model_dir));
  }
  TensorParallelOptions tp;
  tp.n_ranks = options.tensor_parallel_size;
  auto* cpu = dynamic_cast<CpuBackend*>(&backend);
  tp.total_threads = cpu != nullptr ? cpu->pool().n_threads() : 1;
  tp.quantization = options.quantization;
  tp.on_progress = options.on_progress;
  SS_ASSIGN_OR_RETURN(std::unique_ptr<TensorParallelModel> model,
                      TensorParallelModel::create(config, *source, tp));
  source.reset();  // the ranks hold their slices (views keep the mapping alive)

  std::unique_ptr<ModelInstance> instance(new ModelInstance());
  instance->startup_times_.weights_s = seconds_since(weights_start);
  const auto kv_start = std::chrono::steady_clock::now();
  int64_t n_blocks = options.kv_blocks;
  if (n_blocks <= 0) n_blocks = (options.kv_tokens + options.block_size - 1) / options.block_size;
  instance->kv_ =
      model->make_kv_cache(n_blocks, options.block_size, options.kv_dtype.value_or(DType::kF32));
  instance->model_ = std::move(model);
  instance->kv_manager_ = std::make_unique<KvManager>(*instance->kv_);
  instance->startup_times_.kv_reserve_s = seconds_since(kv_start);
  instance->runner_ =
      std::make_unique<ModelRunner>(*instance->model_, *instance->kv_, options.token_picking);
  return instance;
}

Result<std::unique_ptr<ModelInstance>> ModelInstance::create_on_gpu(
    ModelConfig config, const ModelInstanceOptions& options) {
#if SPECSTACK_HAVE_CUDA
  if (options.dummy_weights == false && options.model_dir.empty()) {
    return make_error("no model folder given");
  }
  cuda::CudaInstanceOptions gpu;
  gpu.model_dir = options.model_dir;
  gpu.dummy_weights = options.dummy_weights;
  gpu.dummy_seed = options.dummy_seed;
  gpu.block_size = options.block_size;
  gpu.gpu_memory_fraction = options.gpu_memory_fraction;
  gpu.max_kv_blocks = options.max_kv_blocks;
  gpu.on_progress = options.on_progress;
  gpu.model.max_tokens_per_step = options.max_tokens_per_step;
  if (!options.cuda_graphs) gpu.model.graph_batch_sizes.clear();
  gpu.model.run_attention = options.run_attention;
  gpu.model.fp8_weights = options.quantization == WeightQuantization::kFp8;
  gpu.model.fp8_attention = gpu.model.fp8_weights;
  gpu.kv_blocks = options.kv_blocks;
  if (gpu.kv_blocks <= 0 && options.kv_tokens > 0) {
    gpu.kv_blocks = (options.kv_tokens + options.block_size - 1) / options.block_size;
  }
  const auto build_start = std::chrono::steady_clock::now();
  SS_ASSIGN_OR_RETURN(cuda::CudaInstance built, cuda::create_cuda_instance(config, gpu));
  std::unique_ptr<ModelInstance> instance(new ModelInstance());
  instance->startup_times_.kv_reserve_s = built.kv_reserve_seconds;
  instance->startup_times_.weights_s = seconds_since(build_start) - built.kv_reserve_seconds;
  cuda::CudaModel* model = built.model.get();
  cuda::CudaKvCache* kv = built.kv.get();
  const int64_t capacity = kv->shape().n_blocks * kv->shape().block_size;
  const int64_t graph_context = std::min<int64_t>(options.graph_max_context, capacity);
  const auto capture_start = std::chrono::steady_clock::now();
  model->capture_decode_graphs(*kv, static_cast<int32_t>(graph_context));
  instance->startup_times_.graph_capture_s = seconds_since(capture_start);
  instance->model_ = std::move(built.model);
  instance->kv_ = std::move(built.kv);
  instance->device_scorer_ = [model, kv](const AttentionCapture& capture,
                                         std::span<const int32_t> table, int64_t begin, int64_t end,
                                         int64_t pool_kernel) {
    return model->score_prompt(capture, *kv, table, begin, end, pool_kernel);
  };
  instance->kv_manager_ = std::make_unique<KvManager>(*instance->kv_);
  instance->runner_ =
      std::make_unique<ModelRunner>(*instance->model_, *instance->kv_, options.token_picking);
  return instance;
#else
  (void)config;
  (void)options;
  return make_error(
      "--device cuda: this build has no CUDA backend (nvcc was not found when it was configured; "
      "install the CUDA toolkit and rebuild)");
#endif
}

}  // namespace specstack

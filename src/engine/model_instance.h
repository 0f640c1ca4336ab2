// ModelInstance: one loaded model with everything needed to run it — config,
// weights, its own KV cache and block pool, and a runner. A draft and a
// target are two instances in one process; nothing is shared implicitly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/model_runner.h"
#include "kv/kv_cache.h"
#include "kv/kv_manager.h"
#include "model/cpu_weight_layout.h"
#include "model/transformer.h"
#include "specprefill/attention_capture.h"

namespace specstack {

struct ModelInstanceOptions {
  std::string model_dir;    // HF folder (config.json + safetensors)
  std::string config_path;  // with dummy_weights: a config.json path (or use model_dir)
  bool dummy_weights = false;
  uint64_t dummy_seed = 1234;
  std::string dtype_override;  // "", "f32", "bf16", "f16": dummy weight dtype
  int64_t kv_blocks = 0;       // 0: enough for kv_tokens
  int64_t kv_tokens = 4096;    // KV capacity in tokens when kv_blocks == 0
  int64_t block_size = 16;
  LoadProgress on_progress;  // optional: weight-loading progress (see load_weights)
  // CPU with a GGUF model: dequantize its quantized matrices to f32 at load
  // (the exact-arithmetic reference path) instead of running them quantized.
  bool dequantize_gguf = false;
  // CPU with a safetensors model (or dummy weights): q8_0 / q4_k quantize the
  // matrices at load (--quantization; model/weights.h build_quantized_weights), an
  // error with --device cuda or a GGUF model. kFp8: --device cuda only (e4m3
  // linear layers, CudaModelOptions::fp8_weights).
  WeightQuantization quantization = WeightQuantization::kNone;
  // CPU: how quantized matrices are laid out for the kernels
  // (model/cpu_weight_layout.h): kAuto, Q8_0 panels where this CPU has the
  // VNNI panel kernels (SPECSTACK_QUANT_PANELS=0: never); kAsStored;
  // kPanels, on any CPU (elsewhere the panel matmul is its scalar reference:
  // for tests).
  CpuWeightLayout cpu_layout = CpuWeightLayout::kAuto;
  // Element type of the KV cache (--kv-dtype); unset: the device's own (f32
  // on the CPU, bf16 on the GPU). The CPU takes f32, bf16 or f16, the GPU
  // only bf16 (anything else is an error).
  std::optional<DType> kv_dtype;
  // GPU (--device cuda): bf16 weights and KV on device 0. With kv_blocks == 0
  // and kv_tokens == 0 the KV pool takes gpu_memory_fraction of device memory
  // minus what is already used.
  Device device = Device::kCpu;
  double gpu_memory_fraction = 0.9;
  int64_t max_kv_blocks = 0;           // > 0: cap for the memory-sized GPU pool
  bool cuda_graphs = true;             // capture decode graphs at start-up
  bool run_attention = true;           // paged rows: run kernel (cuda/verify_attention.h)
  int64_t graph_max_context = 32768;   // contexts the decode graphs serve (longer run eagerly)
  int64_t max_tokens_per_step = 8192;  // activation scratch sized up front (GPU)
  // > 1: split the model over this many ranks (parallel/tensor_parallel_model.h).
  // On the CPU the ranks are threads sharing the backend's thread budget (a
  // correctness reference, not a speed-up); on CUDA it is an error until the
  // NCCL rank models exist (issue 13).
  int64_t tensor_parallel_size = 1;
  // Who picks each step's tokens (engine/model_runner.h): the GPU by
  // default; kAlways plans a CPU model's steps as a GPU's (tests of that
  // path), kNever samples every row on the host (comparisons).
  TokenPicking token_picking = TokenPicking::kAuto;
};

// SpecPrefill scoring on the model's own device (GPU): importance of slots
// [slot_begin, slot_end) of a sequence with this block table.
using DeviceScorer = std::function<Result<std::vector<float>>(
    const AttentionCapture& capture, std::span<const int32_t> block_table, int64_t slot_begin,
    int64_t slot_end, int64_t pool_kernel)>;

// Where ModelInstance::create spent its time, for the start-up line.
struct StartupTimes {
  double weights_s = 0;        // read (or generate) and convert the weights
  double kv_reserve_s = 0;     // reserve the KV pool (lazily mapped on the host)
  double graph_capture_s = 0;  // capture the CUDA decode graphs (0 on the CPU)
};

class ModelInstance {
 public:
  static Result<std::unique_ptr<ModelInstance>> create(const ModelInstanceOptions& options,
                                                       Backend& backend);

  const ModelConfig& config() const { return model_->config(); }
  Device device() const { return model_->device(); }
  ForwardModel& model() { return *model_; }
  // Empty on the CPU (the host scorer reads the cache directly).
  const DeviceScorer& device_scorer() const { return device_scorer_; }
  KvCache& kv() { return *kv_; }
  KvManager& kv_manager() { return *kv_manager_; }
  const BlockPool& pool() const { return kv_manager_->pool(); }
  ModelRunner& runner() { return *runner_; }
  const StartupTimes& startup_times() const { return startup_times_; }
  // A line for the user about the load (quantization fallbacks), or empty.
  const std::string& load_note() const { return load_note_; }

 private:
  ModelInstance() = default;
  static Result<std::unique_ptr<ModelInstance>> create_on_gpu(ModelConfig config,
                                                              const ModelInstanceOptions& options);
  static Result<std::unique_ptr<ModelInstance>> create_tensor_parallel(
      ModelConfig config, const ModelInstanceOptions& options, Backend& backend);
  std::unique_ptr<ForwardModel> model_;
  DeviceScorer device_scorer_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvManager> kv_manager_;  // owns the block pool of kv_
  std::unique_ptr<ModelRunner> runner_;
  StartupTimes startup_times_;
  std::string load_note_;
};

}  // namespace specstack

// Building a model on the GPU for ModelInstance: weights (from files or the
// device dummy generator), the CudaModel and its KV cache sized from free
// device memory.
#pragma once

#include <memory>

#include "base/status.h"
#include "cuda/cuda_model.h"

namespace specstack::cuda {

struct CudaInstanceOptions {
  std::string model_dir;
  bool dummy_weights = false;
  uint64_t dummy_seed = 1234;
  int64_t kv_blocks = 0;  // > 0: exactly this many; else from memory
  int64_t block_size = 16;
  // Fraction of the device's total memory this process may use in all
  // (weights, activations and KV); the KV pool takes what is left.
  double gpu_memory_fraction = 0.9;
  int64_t max_kv_blocks = 0;  // > 0: cap for the memory-sized pool
  CudaModelOptions model;
  LoadProgress on_progress;
};

struct CudaInstance {
  std::unique_ptr<CudaModel> model;
  std::unique_ptr<CudaKvCache> kv;
  double kv_reserve_seconds = 0;  // cudaMalloc and zeroing of the pool, synchronised
};

Result<CudaInstance> create_cuda_instance(const ModelConfig& config,
                                          const CudaInstanceOptions& options);

}  // namespace specstack::cuda

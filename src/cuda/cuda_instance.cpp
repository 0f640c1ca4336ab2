#include "cuda/cuda_instance.h"

#include <algorithm>
#include <chrono>

#include "cuda/device_dummy_source.h"

namespace specstack::cuda {

Result<CudaInstance> create_cuda_instance(const ModelConfig& config,
                                          const CudaInstanceOptions& options) {
  if (!cuda_device_available()) return make_error("--device cuda: no usable CUDA device found");
  if (!(options.gpu_memory_fraction > 0.0 && options.gpu_memory_fraction <= 1.0)) {
    return errorf("--gpu-memory-fraction must be in (0, 1], got {}", options.gpu_memory_fraction);
  }
  SS_CUDA_CHECK(cudaSetDevice(options.model.device_index));
  ModelWeights weights;
  if (options.dummy_weights) {
    cudaStream_t stream = nullptr;
    SS_CUDA_CHECK(cudaStreamCreate(&stream));
    DeviceDummySource source(config.weight_dtype, options.dummy_seed, stream);
    auto built = build_weights(config, source, options.on_progress);
    SS_CUDA_CHECK(cudaStreamSynchronize(stream));
    SS_CUDA_CHECK(cudaStreamDestroy(stream));
    if (!built.ok()) return built.error();
    weights = std::move(built).value();
  } else {
    SS_ASSIGN_OR_RETURN(weights, load_weights(config, options.model_dir, options.on_progress));
  }
  CudaInstance out;
  SS_ASSIGN_OR_RETURN(out.model, CudaModel::create(config, std::move(weights), options.model));

  KvCacheShape shape = out.model->kv_shape(1, options.block_size);
  const size_t block_bytes = CudaKvCache::bytes_per_block(shape);
  int64_t n_blocks = options.kv_blocks;
  if (n_blocks <= 0) {
    size_t free_bytes = 0, total_bytes = 0;
    SS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const double budget = options.gpu_memory_fraction * static_cast<double>(total_bytes) -
                          static_cast<double>(total_bytes - free_bytes);
    // Head-room for cuBLAS, graphs and the attention workspaces.
    const double reserve = 1.5 * 1073741824.0;
    n_blocks = static_cast<int64_t>((budget - reserve) / static_cast<double>(block_bytes));
    if (options.max_kv_blocks > 0) n_blocks = std::min(n_blocks, options.max_kv_blocks);
    if (n_blocks < 1) {
      return errorf(
          "--device cuda: no memory left for the KV cache (weights use {:.1f} GiB; raise "
          "--gpu-memory-fraction or use a smaller model)",
          out.model->weight_bytes() / 1073741824.0);
    }
  }
  const auto kv_start = std::chrono::steady_clock::now();
  out.kv = out.model->make_kv_cache(n_blocks, options.block_size);
  // The pool is zeroed asynchronously; wait, so the time is the reserve's own.
  SS_CUDA_CHECK(cudaDeviceSynchronize());
  out.kv_reserve_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - kv_start).count();
  return out;
}

}  // namespace specstack::cuda

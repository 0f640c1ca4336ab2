#include "engine/model_instance.h"

#include <filesystem>

namespace specstack {

Result<std::unique_ptr<ModelInstance>> ModelInstance::create(const ModelInstanceOptions& options,
                                                             Backend& backend) {
  std::string config_path = options.config_path;
  if (config_path.empty()) {
    if (options.model_dir.empty()) return make_error("no model folder or config given");
    config_path = options.model_dir;
  }
  SS_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(config_path));
  if (options.dtype_override == "f32") config.weight_dtype = DType::kF32;
  else if (options.dtype_override == "bf16") config.weight_dtype = DType::kBF16;
  else if (options.dtype_override == "f16") config.weight_dtype = DType::kF16;
  else if (!options.dtype_override.empty()) {
    return errorf("unknown dtype '{}' (expected f32, bf16 or f16)", options.dtype_override);
  }

  ModelWeights weights;
  if (options.dummy_weights) {
    weights = make_dummy_weights(config, options.dummy_seed, options.on_progress);
  } else {
    if (options.model_dir.empty()) return make_error("no model folder given");
    SS_ASSIGN_OR_RETURN(weights, load_weights(config, options.model_dir, options.on_progress));
  }
  if (options.block_size <= 0) return errorf("block size must be positive, got {}", options.block_size);

  std::unique_ptr<ModelInstance> instance(new ModelInstance());
  instance->model_ = std::make_unique<Transformer>(std::move(config), std::move(weights), backend);
  int64_t n_blocks = options.kv_blocks;
  if (n_blocks <= 0) n_blocks = (options.kv_tokens + options.block_size - 1) / options.block_size;
  instance->kv_ = std::make_unique<KvCache>(instance->model_->kv_shape(n_blocks, options.block_size));
  instance->kv_manager_ = std::make_unique<KvManager>(*instance->kv_);
  instance->runner_ = std::make_unique<ModelRunner>(*instance->model_, *instance->kv_);
  return instance;
}

}  // namespace specstack

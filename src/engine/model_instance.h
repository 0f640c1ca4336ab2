// ModelInstance: one loaded model with everything needed to run it — config,
// weights, its own KV cache and block pool, and a runner. A draft and a
// target are two instances in one process; nothing is shared implicitly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "engine/model_runner.h"
#include "kv/kv_cache.h"
#include "kv/kv_manager.h"
#include "model/transformer.h"

namespace specstack {

struct ModelInstanceOptions {
  std::string model_dir;         // HF folder (config.json + safetensors)
  std::string config_path;       // with dummy_weights: a config.json path (or use model_dir)
  bool dummy_weights = false;
  uint64_t dummy_seed = 1234;
  std::string dtype_override;    // "", "f32", "bf16", "f16": dummy weight dtype
  int64_t kv_blocks = 0;         // 0: enough for kv_tokens
  int64_t kv_tokens = 4096;      // KV capacity in tokens when kv_blocks == 0
  int64_t block_size = 16;
  LoadProgress on_progress;      // optional: weight-loading progress (see load_weights)
};

class ModelInstance {
 public:
  static Result<std::unique_ptr<ModelInstance>> create(const ModelInstanceOptions& options,
                                                       Backend& backend);

  const ModelConfig& config() const { return model_->config(); }
  Transformer& model() { return *model_; }
  KvCache& kv() { return *kv_; }
  KvManager& kv_manager() { return *kv_manager_; }
  const BlockPool& pool() const { return kv_manager_->pool(); }
  ModelRunner& runner() { return *runner_; }

 private:
  ModelInstance() = default;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvManager> kv_manager_;  // owns the block pool of kv_
  std::unique_ptr<ModelRunner> runner_;
};

}  // namespace specstack

// ModelConfig from a GGUF file's metadata (llama.cpp's key names), for the
// architectures the engine runs: llama (mistral-style when the file gives a
// sliding window), qwen2, qwen3 and qwen3moe. Strict like config.json
// parsing: an unknown architecture, an unsupported rope scaling or a missing
// key is an error naming it.
#pragma once

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "model/config.h"

namespace specstack {

Result<ModelConfig> model_config_from_gguf(const gguf::GgufFile& file);

}  // namespace specstack

// Writes tensors to a .safetensors file (used by `specstack logits --out`).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tensor/tensor.h"

namespace specstack {

// Tensors are written in the given order; names must be unique.
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace specstack

// The quantization_config llm-compressor writes for an FP8 checkpoint
// (compressed-tensors, "float-quantized"): 8-bit float weights with
// `strategy` "channel" or "tensor" scales, dynamic per-token activations,
// the LM head left out. Shared by the config and the FP8-checkpoint tests.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace specstack::testing {

inline nlohmann::json fp8_compressed_tensors_config(const std::string& strategy) {
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"ignore", {"lm_head"}},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights",
               {{"num_bits", 8},
                {"type", "float"},
                {"strategy", strategy},
                {"symmetric", true},
                {"dynamic", false}}},
              {"input_activations",
               {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}}};
}

}  // namespace specstack::testing

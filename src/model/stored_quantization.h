// Checkpoints stored quantized: which `quantization_config` the loader reads.
//
// Two FP8 formats are read, both as e4m3 matrices `<linear>.weight` (F8_E4M3)
// with a scale `<linear>.weight_scale` per output row or per matrix, which
// model/weights.cpp dequantizes at load (to bf16: the CPU runs them as any
// bf16 model; on the GPU `--quantization fp8` takes them back to e4m3):
//  * compressed-tensors "float-quantized" (vLLM's / llm-compressor's FP8):
//    every config group's weights 8-bit float, strategy "channel" or
//    "tensor", static; input activations dynamic or static (a static
//    input_scale is not read: activations stay bf16, or per-token on the GPU's
//    FP8 path), no KV cache scheme;
//  * fbgemm_fp8 (per-channel weight scales; activation_scale_ub not read).
// Everything else (GPTQ, AWQ, bitsandbytes, int8 / int4 compressed-tensors,
// block-wise FP8 "fp8" with weight_block_size, FP8 KV caches) is refused
// with the method's name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "tensor/tensor.h"

namespace specstack {

// The accepted method's name ("compressed-tensors" / "fbgemm_fp8"), or an
// error naming what is not supported; `where` prefixes messages.
Result<std::string> parse_stored_quantization(const nlohmann::json& quantization_config,
                                              const std::string& where);

// An FP8 checkpoint's matrix `name` ([rows, cols] e4m3) times its f32 scale
// (one per row: [rows] or [rows, 1]; or one for the matrix) as a fresh bf16
// tensor, each element rounded once. Block-wise scales are an error.
Result<Tensor> dequantize_e4m3_matrix(const std::string& name, const Tensor& q,
                                      const Tensor& scale);

}  // namespace specstack

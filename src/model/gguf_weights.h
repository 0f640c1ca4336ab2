// ModelWeights from a GGUF file, through the same WeightSource interface as
// safetensors: HF tensor names are mapped to llama.cpp's (token_embd,
// blk.N.attn_q, ffn_gate_exps ...), llama's permuted q/k rows are put back in
// HF order, and the data is handed over in one dtype for the backend: F16 or
// BF16 views of the mapping when every matrix is stored that way, otherwise
// f32; with options.keep_quantized, matrices of a type the CPU kernels run
// (Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K) stay in their blocks as quantized-dtype
// views of the mapping (copies where llama's q/k rows are un-permuted), and
// the rest (Q4_1, Q5_1) are dequantized to f32.
#pragma once

#include <string>

#include "base/status.h"
#include "model/weights.h"

namespace specstack {

Result<ModelWeights> load_gguf_weights(const ModelConfig& config, const std::string& path,
                                       const LoadProgress& on_progress = {},
                                       const WeightLoadOptions& options = {});

// The llama.cpp name of an HF tensor name ("model.layers.3.self_attn.q_proj.weight"
// -> "blk.3.attn_q.weight"); for routed experts ("...mlp.experts.5.up_proj.weight")
// the stacked tensor's name, with the expert index in *expert. "" when unknown.
std::string gguf_tensor_name(const std::string& hf_name, int64_t* expert);

}  // namespace specstack

// ModelWeights: every tensor of a decoder-only transformer, by role, with HF
// shapes. Large matrices are views into the mmap'd safetensors (or seeded
// random buffers for --dummy-weights) in their stored dtype; the small
// vectors (norm weights, biases) are converted to f32 once at load.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace specstack {

struct ExpertWeights {
  Tensor w_gate;  // [expert_inter, hidden]
  Tensor w_up;    // [expert_inter, hidden]
  Tensor w_down;  // [hidden, expert_inter]
};

struct LayerWeights {
  Tensor attn_norm;  // [hidden] f32
  Tensor wq;         // [n_heads * head_dim, hidden]
  Tensor wk;         // [n_kv_heads * head_dim, hidden]
  Tensor wv;         // [n_kv_heads * head_dim, hidden]
  Tensor bq;         // [n_heads * head_dim] f32, only with attention_bias
  Tensor bk;         // [n_kv_heads * head_dim] f32, only with attention_bias
  Tensor bv;         // [n_kv_heads * head_dim] f32, only with attention_bias
  Tensor wo;         // [hidden, n_heads * head_dim]
  Tensor bo;      // [hidden] f32, only with attention_bias outside qwen2 (HF puts it on o_proj too)
  Tensor q_norm;  // [head_dim] f32, only with qk_norm
  Tensor k_norm;  // [head_dim] f32, only with qk_norm
  Tensor ffn_norm;  // [hidden] f32
  // Dense MLP (non-MoE layers).
  Tensor w_gate;  // [intermediate, hidden]
  Tensor w_up;    // [intermediate, hidden]
  Tensor w_down;  // [hidden, intermediate]
  // Routed experts (MoE layers).
  Tensor router;                       // [n_experts, hidden]
  std::vector<ExpertWeights> experts;  // [n_experts]
};

struct ModelWeights {
  Tensor embed;                      // [vocab, hidden]
  std::vector<LayerWeights> layers;  // [n_layers]
  Tensor final_norm;                 // [hidden] f32
  Tensor lm_head;                    // [vocab, hidden]; shares storage with embed when tied
  Tensor rope_inv_freq;              // [head_dim / 2] f32, RoPE frequencies after any scaling
  size_t weight_bytes = 0;           // bytes of all distinct weight tensors, for start-up reporting
  std::string load_note;             // one line for the user (quantization fallbacks), or empty
  // The model file the matrices are views of (GGUF), or null: a pass that
  // copies a view out (model/cpu_weight_layout.h) may release the pages it read.
  std::shared_ptr<const MappedFile> mapping;
};

// Progress of a weight load, for a start-up progress bar: called on the
// loading thread with done = 1 after the embeddings, final norm and LM head,
// then once per decoder layer, up to done == total == n_layers + 1. An empty
// function is never called.
using LoadProgress = std::function<void(int64_t done, int64_t total)>;

// Where tensors come from: safetensors files, a seeded generator, or (for
// the CUDA backend) a generator that fills device memory directly.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // The tensor in its stored dtype, shape-checked. Matrices may live on a
  // device; 1-D tensors (norms, biases) must be host tensors.
  virtual Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                             bool is_norm) = 0;
  // True when get() returns views of storage the source keeps alive anyway (a
  // file mapping), so a slice of rows may stay a view; false when each get()
  // makes a fresh buffer that a sliced copy should replace (dummy weights).
  virtual bool tensors_are_views() const { return false; }
};

// The safetensors of an HF folder as a WeightSource (mmap'd, zero-copy).
Result<std::unique_ptr<WeightSource>> open_safetensors_source(const std::string& model_dir);
// The --dummy-weights generator as a WeightSource (see make_dummy_tensor).
std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed);

// Assembles ModelWeights from any source using HF tensor names.
Result<ModelWeights> build_weights(const ModelConfig& config, WeightSource& source,
                                   const LoadProgress& on_progress = {});

// The --dummy-weights generator: a per-tensor stream from the seed and the
// HF tensor name, then element i = amplitude * (u(stream, i) * 2 - 1).
uint64_t dummy_stream_seed(uint64_t seed, const std::string& name);
float dummy_amplitude();
Tensor make_dummy_tensor(DType dtype, const std::vector<int64_t>& shape, uint64_t stream,
                         bool is_norm);

// kFp8: e4m3 linear weights on the CUDA backend (CudaModelOptions::fp8_weights);
// the CPU loaders refuse it.
enum class WeightQuantization : uint8_t { kNone, kQ8_0, kQ4_K, kFp8 };

// "q8_0" / "q4_k" / "fp8" (and "none"), for the --quantization flag.
Result<WeightQuantization> parse_weight_quantization(const std::string& name);

struct WeightLoadOptions {
  // GGUF: keep Q8_0 / Q4_0 / Q5_0 / Q4_K / Q5_K / Q6_K matrices in their
  // block format (views of the mapping) for the CPU backend's quantized
  // kernels, instead of dequantizing them to f32 (what the CUDA backend and
  // the f32 reference path take). Other quantized types are dequantized.
  bool keep_quantized = false;
  // Safetensors (and dummy weights) on the CPU: quantize the matrices at
  // load (--quantization; see build_quantized_weights). A GGUF file with anything
  // but kNone is an error: it is quantized already.
  WeightQuantization quantization = WeightQuantization::kNone;
};

// build_weights with each matrix quantized as it is loaded, for the CPU's
// quantized kernels (--quantization; kNone: build_weights itself). kQ8_0:
// every matrix but the MoE router to Q8_0. kQ4_K: llama.cpp's Q4_K_M mix
// (model/quant_mix.h: Q6_K for the LM head, and for attn_v and ffn_down in
// about half the layers, Q4_K for the rest). Rows not a multiple of 256 fall
// back to Q8_0, rows not a multiple of 32 stay in their dtype;
// weights.load_note says so in one line (empty when there were none).
// Norms, biases and the router stay as they are: llama-quantize leaves
// ffn_gate_inp unquantized too, and routing decisions are sensitive to
// small logit errors. Tied embeddings stay shared.
Result<ModelWeights> build_quantized_weights(const ModelConfig& config, WeightSource& source,
                                             WeightQuantization quantization,
                                             const LoadProgress& on_progress = {});

// Loads the weights of `config` from the safetensors in model_dir (mmap'd,
// zero-copy), or from model_dir naming a GGUF file (model/gguf_weights.h). Every expected tensor
// must exist with the expected shape; errors name the tensor and both shapes. On an error the
// progress stops short of total.
Result<ModelWeights> load_weights(const ModelConfig& config, const std::string& model_dir,
                                  const LoadProgress& on_progress = {},
                                  const WeightLoadOptions& options = {});

// Seeded random weights in config.weight_dtype (norm weights 1, others small
// uniform noise), no files: for benchmarks on published shapes.
ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed,
                                const LoadProgress& on_progress = {},
                                WeightQuantization quantization = WeightQuantization::kNone);

// RoPE inverse frequencies exactly as transformers computes them in fp32.
Tensor compute_rope_inv_freq(const ModelConfig& config);

}  // namespace specstack

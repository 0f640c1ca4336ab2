#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "base/load_shares.h"
#include "gguf/gguf_file.h"
#include "model/gguf_weights.h"
#include "model/safetensors.h"
#include "model/stored_quantization.h"

namespace specstack {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  return Tensor::view(nullptr, DType::kF32, shape, nullptr).shape_string();
}

Tensor to_f32(const Tensor& src) {
  if (src.dtype() == DType::kF32) return src;
  Tensor out = Tensor::zeros(DType::kF32, src.shape());
  const int64_t n = src.numel();
  float* dst = out.f32();
  const uint16_t* bits = src.data<uint16_t>();
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = src.dtype() == DType::kBF16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
  }
  return out;
}

class SafetensorsSource final : public WeightSource {
 public:
  explicit SafetensorsSource(WeightFiles files) : files_(std::move(files)) {
    for (const std::string& name : files_.names()) {
      Result<Tensor> tensor = files_.get(name);  // a view (HF aligns every tensor)
      if (tensor.ok() && tensor->dtype() == DType::kF8E4M3) has_e4m3_ = true;
    }
  }
  bool has(const std::string& name) const override { return files_.contains(name); }
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                     bool /*is_norm*/) override {
    if (!files_.contains(name)) return errorf("weights: missing tensor '{}'", name);
    SS_ASSIGN_OR_RETURN(Tensor tensor, files_.get(name));
    if (tensor.shape() != shape) {
      return errorf("weights: tensor '{}' has shape {}, expected {} from config.json", name,
                    tensor.shape_string(), shape_text(shape));
    }
    if (tensor.dtype() == DType::kI32)
      return errorf("weights: tensor '{}' is not floating point", name);
    if (tensor.dtype() == DType::kF8E4M3) return dequantize_e4m3(name, tensor);
    return tensor;
  }
  // An FP8 checkpoint's matrices come back as fresh bf16 buffers, which a
  // tensor-parallel rank should copy its rows out of rather than keep whole.
  bool tensors_are_views() const override { return !has_e4m3_; }

 private:
  // An FP8 checkpoint's matrix and its `<name>_scale`, as bf16.
  Result<Tensor> dequantize_e4m3(const std::string& name, const Tensor& q) {
    const std::string scale_name = name + "_scale";
    if (!files_.contains(scale_name)) {
      return errorf("weights: tensor '{}' is F8_E4M3 without its scale '{}'", name, scale_name);
    }
    SS_ASSIGN_OR_RETURN(Tensor scale, files_.get(scale_name));
    if (scale.dtype() != DType::kF32 && scale.dtype() != DType::kBF16 &&
        scale.dtype() != DType::kF16) {
      return errorf("weights: scale '{}' is not floating point", scale_name);
    }
    return dequantize_e4m3_matrix(name, q, to_f32(scale));
  }

  WeightFiles files_;
  bool has_e4m3_ = false;
};

class DummySource final : public WeightSource {
 public:
  DummySource(DType dtype, uint64_t seed) : dtype_(dtype), seed_(seed) {}
  bool has(const std::string&) const override { return true; }
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                     bool is_norm) override {
    return make_dummy_tensor(dtype_, shape, dummy_stream_seed(seed_, name), is_norm);
  }

 private:
  DType dtype_;
  uint64_t seed_;
};

}  // namespace

Result<std::unique_ptr<WeightSource>> open_safetensors_source(const std::string& model_dir) {
  SS_ASSIGN_OR_RETURN(WeightFiles files, WeightFiles::open(model_dir));
  return std::unique_ptr<WeightSource>(std::make_unique<SafetensorsSource>(std::move(files)));
}

std::unique_ptr<WeightSource> make_dummy_source(DType dtype, uint64_t seed) {
  return std::make_unique<DummySource>(dtype, seed);
}

uint64_t dummy_stream_seed(uint64_t seed, const std::string& name) {
  return seed ^ (std::hash<std::string>{}(name)*0x9E3779B97F4A7C15ull);
}

float dummy_amplitude() {
  return 0.02f * std::sqrt(3.0f);
}

Tensor make_dummy_tensor(DType dtype, const std::vector<int64_t>& shape, uint64_t stream,
                         bool is_norm) {
  Tensor out = Tensor::zeros(dtype, shape);
  const int64_t n = out.numel();
  // Uniform noise with std 0.02 (like HF init); norm weights are exactly 1.
  // Each element is a counter-based hash of its index, so filling splits
  // over threads and the values do not depend on the thread count (the CUDA
  // backend's fill_dummy_bf16 computes the same values on the device).
  const float amplitude = dummy_amplitude();
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float value = 1.0f;
      if (!is_norm) {
        uint64_t z = stream + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        value = amplitude * (static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
      }
      switch (dtype) {
        case DType::kF32:
          out.f32()[i] = value;
          break;
        case DType::kBF16:
          out.data<uint16_t>()[i] = f32_to_bf16(value);
          break;
        case DType::kF16:
          out.data<uint16_t>()[i] = f32_to_f16(value);
          break;
        default:  // dummy weights are float tensors only (never int or block-quantized)
          SS_CHECK(false);
      }
    }
  };
  run_load_shares(n, load_share_count(n),
                  [&](int64_t, int64_t begin, int64_t end) { fill(begin, end); });
  return out;
}

Result<ModelWeights> build_weights(const ModelConfig& config, WeightSource& source,
                                   const LoadProgress& on_progress) {
  const int64_t n_steps = config.n_layers + 1;  // the embeddings and head, then each layer
  auto report = [&](int64_t done) {
    if (on_progress) on_progress(done, n_steps);
  };
  const int64_t hidden = config.hidden_size;
  const int64_t q_width = config.n_heads * config.head_dim;
  const int64_t kv_width = config.n_kv_heads * config.head_dim;
  ModelWeights weights;
  size_t bytes = 0;
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape) -> Result<Tensor> {
    SS_ASSIGN_OR_RETURN(Tensor t, source.get(name, shape, false));
    bytes += t.nbytes();
    return t;
  };
  auto vector_f32 = [&](const std::string& name, int64_t size, bool is_norm) -> Result<Tensor> {
    SS_ASSIGN_OR_RETURN(Tensor t, source.get(name, {size}, is_norm));
    bytes += t.nbytes();
    return to_f32(t);
  };

  // Tied checkpoints may store the table under either name (TinyStories keeps
  // only lm_head.weight and aliases the embedding to it).
  const std::string embed_name = "model.embed_tokens.weight";
  const std::string head_name = "lm_head.weight";
  if (source.has(embed_name)) {
    SS_ASSIGN_OR_RETURN(weights.embed, matrix(embed_name, {config.vocab_size, hidden}));
  } else if (config.tie_word_embeddings && source.has(head_name)) {
    SS_ASSIGN_OR_RETURN(weights.embed, matrix(head_name, {config.vocab_size, hidden}));
  } else {
    return errorf("weights: missing tensor '{}'", embed_name);
  }
  if (config.tie_word_embeddings) {
    weights.lm_head = weights.embed;
  } else {
    SS_ASSIGN_OR_RETURN(weights.lm_head, matrix(head_name, {config.vocab_size, hidden}));
  }
  SS_ASSIGN_OR_RETURN(weights.final_norm, vector_f32("model.norm.weight", hidden, true));
  report(1);

  for (int64_t l = 0; l < config.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerWeights layer;
    SS_ASSIGN_OR_RETURN(layer.attn_norm, vector_f32(p + "input_layernorm.weight", hidden, true));
    SS_ASSIGN_OR_RETURN(layer.ffn_norm,
                        vector_f32(p + "post_attention_layernorm.weight", hidden, true));
    SS_ASSIGN_OR_RETURN(layer.wq, matrix(p + "self_attn.q_proj.weight", {q_width, hidden}));
    SS_ASSIGN_OR_RETURN(layer.wk, matrix(p + "self_attn.k_proj.weight", {kv_width, hidden}));
    SS_ASSIGN_OR_RETURN(layer.wv, matrix(p + "self_attn.v_proj.weight", {kv_width, hidden}));
    SS_ASSIGN_OR_RETURN(layer.wo, matrix(p + "self_attn.o_proj.weight", {hidden, q_width}));
    if (config.attention_bias) {
      SS_ASSIGN_OR_RETURN(layer.bq, vector_f32(p + "self_attn.q_proj.bias", q_width, false));
      SS_ASSIGN_OR_RETURN(layer.bk, vector_f32(p + "self_attn.k_proj.bias", kv_width, false));
      SS_ASSIGN_OR_RETURN(layer.bv, vector_f32(p + "self_attn.v_proj.bias", kv_width, false));
      if (config.arch != Architecture::kArchitectureQwen2) {
        SS_ASSIGN_OR_RETURN(layer.bo, vector_f32(p + "self_attn.o_proj.bias", hidden, false));
      }
    }
    if (config.qk_norm) {
      SS_ASSIGN_OR_RETURN(layer.q_norm,
                          vector_f32(p + "self_attn.q_norm.weight", config.head_dim, true));
      SS_ASSIGN_OR_RETURN(layer.k_norm,
                          vector_f32(p + "self_attn.k_norm.weight", config.head_dim, true));
    }
    if (config.layer_is_moe(l)) {
      const int64_t inter = config.moe.expert_intermediate_size;
      SS_ASSIGN_OR_RETURN(layer.router,
                          matrix(p + "mlp.gate.weight", {config.moe.n_experts, hidden}));
      for (int64_t e = 0; e < config.moe.n_experts; ++e) {
        const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
        ExpertWeights expert;
        SS_ASSIGN_OR_RETURN(expert.w_gate, matrix(q + "gate_proj.weight", {inter, hidden}));
        SS_ASSIGN_OR_RETURN(expert.w_up, matrix(q + "up_proj.weight", {inter, hidden}));
        SS_ASSIGN_OR_RETURN(expert.w_down, matrix(q + "down_proj.weight", {hidden, inter}));
        layer.experts.push_back(std::move(expert));
      }
    } else {
      const int64_t inter = config.intermediate_size;
      SS_ASSIGN_OR_RETURN(layer.w_gate, matrix(p + "mlp.gate_proj.weight", {inter, hidden}));
      SS_ASSIGN_OR_RETURN(layer.w_up, matrix(p + "mlp.up_proj.weight", {inter, hidden}));
      SS_ASSIGN_OR_RETURN(layer.w_down, matrix(p + "mlp.down_proj.weight", {hidden, inter}));
    }
    weights.layers.push_back(std::move(layer));
    report(l + 2);
  }
  weights.rope_inv_freq = compute_rope_inv_freq(config);
  weights.weight_bytes = bytes;
  return weights;
}

Tensor compute_rope_inv_freq(const ModelConfig& config) {
  // Mirrors transformers' fp32 arithmetic so angles match the references.
  const int64_t half = config.head_dim / 2;
  Tensor out = Tensor::zeros(DType::kF32, {half});
  const float base = static_cast<float>(config.rope.theta);
  const float dim = static_cast<float>(config.head_dim);
  const RopeConfig& rope = config.rope;
  const float kPi = 3.14159265358979323846f;
  for (int64_t j = 0; j < half; ++j) {
    float inv = 1.0f / std::pow(base, static_cast<float>(2 * j) / dim);
    if (rope.type == RopeType::kRopeLlama3) {
      const float factor = static_cast<float>(rope.factor);
      const float low = static_cast<float>(rope.low_freq_factor);
      const float high = static_cast<float>(rope.high_freq_factor);
      const float old_ctx = static_cast<float>(rope.original_max_position_embeddings);
      const float low_freq_wavelen = old_ctx / low;
      const float high_freq_wavelen = old_ctx / high;
      const float wavelen = 2.0f * kPi / inv;
      float scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
      const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      if (medium) {
        const float smooth = (old_ctx / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      inv = scaled;
    }
    // GGUF files carry llama3 scaling as per-frequency divisors instead.
    if (!rope.freq_factors.empty()) inv /= rope.freq_factors[static_cast<size_t>(j)];
    out.f32()[j] = inv;
  }
  return out;
}

Result<ModelWeights> load_weights(const ModelConfig& config, const std::string& model_dir,
                                  const LoadProgress& on_progress,
                                  const WeightLoadOptions& options) {
  if (gguf::is_gguf_file(model_dir)) {
    if (options.quantization != WeightQuantization::kNone) {
      return errorf(
          "--quantization applies to safetensors models; {} is a GGUF file (already "
          "quantized: its blocks run as stored)",
          model_dir);
    }
    return load_gguf_weights(config, model_dir, on_progress, options);
  }
  SS_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> source, open_safetensors_source(model_dir));
  SS_ASSIGN_OR_RETURN(ModelWeights weights,
                      build_quantized_weights(config, *source, options.quantization, on_progress));
  if (!config.stored_quantization.empty()) {
    const std::string note = "FP8 checkpoint (" + config.stored_quantization +
                             "): e4m3 matrices dequantized to bf16 at load";
    weights.load_note = weights.load_note.empty() ? note : note + "; " + weights.load_note;
  }
  return weights;
}

ModelWeights make_dummy_weights(const ModelConfig& config, uint64_t seed,
                                const LoadProgress& on_progress, WeightQuantization quantization) {
  std::unique_ptr<WeightSource> source = make_dummy_source(config.weight_dtype, seed);
  Result<ModelWeights> weights =
      build_quantized_weights(config, *source, quantization, on_progress);
  SS_CHECK_MSG(weights.ok(), weights.ok() ? "" : weights.message());
  return std::move(weights).value();
}

}  // namespace specstack

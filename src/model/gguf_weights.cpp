#include "model/gguf_weights.h"

#include <cstring>
#include <optional>
#include <regex>

#include "gguf/gguf_dequant.h"
#include "gguf/gguf_file.h"

namespace specstack {
namespace {

using gguf::GgmlType;
using gguf::TensorInfo;

struct NameRule {
  const char* hf;    // suffix after "model.layers.N." (or the whole name)
  const char* gguf;  // suffix after "blk.N."
};

constexpr NameRule kLayerRules[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
};

std::string shape_text(const std::vector<int64_t>& shape) {
  return Tensor::view(nullptr, DType::kF32, shape, nullptr).shape_string();
}

bool is_quantized(uint32_t type) {
  const auto t = static_cast<GgmlType>(type);
  return t != GgmlType::kF32 && t != GgmlType::kF16 && t != GgmlType::kBF16;
}

// convert_hf_to_gguf permutes llama's q/k rows for ggml's interleaved RoPE:
// within each head, HF row (s * half + i) is stored as row (2 * i + s).
// Undoing it moves whole rows, which are whole quantization blocks too.
std::vector<uint8_t> unpermute_rows(const uint8_t* src, int64_t rows, int64_t row_bytes,
                                    int64_t head_dim) {
  std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
  const int64_t half = head_dim / 2;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / head_dim, within = r % head_dim;
    const int64_t s = within / half, i = within % half;
    const int64_t stored = head * head_dim + 2 * i + s;
    std::memcpy(out.data() + r * row_bytes, src + stored * row_bytes,
                static_cast<size_t>(row_bytes));
  }
  return out;
}

class GgufSource final : public WeightSource {
 public:
  GgufSource(gguf::GgufFile file, const ModelConfig& config, const WeightLoadOptions& options)
      : file_(std::move(file)), config_(config), options_(options) {
    // One dtype for every matrix: the stored float type when all share it,
    // otherwise f32 (dequantized).
    DType common = DType::kF32;
    bool first = true;
    for (const TensorInfo& t : file_.header().tensors) {
      if (t.dims.size() < 2) continue;
      DType d = DType::kF32;
      if (t.type == static_cast<uint32_t>(GgmlType::kF16)) d = DType::kF16;
      if (t.type == static_cast<uint32_t>(GgmlType::kBF16)) d = DType::kBF16;
      if (is_quantized(t.type)) d = DType::kF32;
      common = first || d == common ? d : DType::kF32;
      first = false;
    }
    dtype_ = common;
  }

  bool has(const std::string& name) const override {
    int64_t expert = -1;
    const std::string g = gguf_tensor_name(name, &expert);
    return !g.empty() && file_.header().find_tensor(g) != nullptr;
  }

  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                     bool /*is_norm*/) override {
    int64_t expert = -1;
    const std::string g = gguf_tensor_name(name, &expert);
    const TensorInfo* info = g.empty() ? nullptr : file_.header().find_tensor(g);
    if (!info) return errorf("gguf: missing tensor '{}' (for {})", g.empty() ? name : g, name);
    std::vector<int64_t> stored = info->shape();
    if (expert >= 0) {  // [n_experts, rows, cols]: take one expert's slice
      if (stored.size() != 3 || expert >= stored[0]) {
        return errorf("gguf: tensor '{}' has shape {}, expected [experts, ...]", g,
                      shape_text(stored));
      }
      stored.erase(stored.begin());
    }
    if (stored != shape) {
      return errorf("gguf: tensor '{}' has shape {}, expected {} from the metadata", g,
                    shape_text(stored), shape_text(shape));
    }
    SS_TRY(gguf::check_dequantizable(*info));
    const auto traits = gguf::ggml_type_traits(info->type);
    const int64_t row = info->dims[0];
    const int64_t rows = Tensor::view(nullptr, DType::kF32, shape, nullptr).numel() / row;
    const int64_t row_bytes = row / traits->block_elements * traits->block_bytes;
    const uint8_t* src = file_.tensor_data(*info) + (expert >= 0 ? expert * rows * row_bytes : 0);
    std::vector<uint8_t> permuted;
    if (needs_unpermute(g)) {
      permuted = unpermute_rows(src, rows, row_bytes, config_.head_dim);
      src = permuted.data();
    }
    return materialize(*info, src, shape, row_bytes * rows, !permuted.empty());
  }

 private:
  bool needs_unpermute(const std::string& g) const {
    if (config_.arch != Architecture::kArchitectureLlama &&
        config_.arch != Architecture::kArchitectureMistral) {
      return false;
    }
    auto ends_with = [&](const char* s) {
      const size_t n = std::strlen(s);
      return g.size() >= n && g.compare(g.size() - n, n, s) == 0;
    };
    return ends_with(".attn_q.weight") || ends_with(".attn_k.weight") ||
           ends_with(".attn_q.bias") || ends_with(".attn_k.bias");
  }

  // The bytes at src as a tensor of `shape`: a zero-copy view when the stored
  // type is the target dtype and the bytes are the mapping's, else converted.
  Result<Tensor> materialize(const TensorInfo& info, const uint8_t* src,
                             const std::vector<int64_t>& shape, int64_t nbytes, bool copied) {
    const bool vector = shape.size() == 1;
    const std::optional<DType> kept = kept_quantized(info.type);
    if (!vector && options_.keep_quantized && kept) {
      if (!copied) return Tensor::view(const_cast<uint8_t*>(src), *kept, shape, file_.owner());
      Tensor out = Tensor::zeros(*kept, shape);
      std::memcpy(out.raw(), src, static_cast<size_t>(nbytes));
      return out;
    }
    const DType want = vector ? DType::kF32 : dtype_;
    const bool same = (want == DType::kF32 && info.type == 0) ||
                      (want == DType::kF16 && info.type == static_cast<uint32_t>(GgmlType::kF16)) ||
                      (want == DType::kBF16 && info.type == static_cast<uint32_t>(GgmlType::kBF16));
    if (same && !copied) {
      return Tensor::view(const_cast<uint8_t*>(src), want, shape, file_.owner());
    }
    Tensor out = Tensor::zeros(want, shape);
    if (same) {
      std::memcpy(out.raw(), src, static_cast<size_t>(nbytes));
      return out;
    }
    if (want != DType::kF32) return errorf("gguf: internal: mixed dtypes for '{}'", info.name);
    const int64_t row = info.dims[0];
    SS_TRY(gguf::dequantize_rows(info.type, src, out.numel() / row, row, out.f32()));
    return out;
  }

  // The DType of a GGUF type the CPU quantized kernels run.
  static std::optional<DType> kept_quantized(uint32_t type) {
    switch (static_cast<GgmlType>(type)) {
      case GgmlType::kQ8_0:
        return DType::kQ8_0;
      case GgmlType::kQ4_0:
        return DType::kQ4_0;
      case GgmlType::kQ5_0:
        return DType::kQ5_0;
      case GgmlType::kQ4_K:
        return DType::kQ4_K;
      case GgmlType::kQ5_K:
        return DType::kQ5_K;
      case GgmlType::kQ6_K:
        return DType::kQ6_K;
      default:
        return std::nullopt;
    }
  }

  gguf::GgufFile file_;
  ModelConfig config_;
  WeightLoadOptions options_;
  DType dtype_ = DType::kF32;
};

}  // namespace

std::string gguf_tensor_name(const std::string& hf_name, int64_t* expert) {
  *expert = -1;
  if (hf_name == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf_name == "lm_head.weight") return "output.weight";
  if (hf_name == "model.norm.weight") return "output_norm.weight";
  static const std::regex layer_re(R"(model\.layers\.(\d+)\.(.+))");
  static const std::regex expert_re(R"(mlp\.experts\.(\d+)\.(gate|up|down)_proj\.weight)");
  std::smatch m;
  if (!std::regex_match(hf_name, m, layer_re)) return "";
  const std::string prefix = "blk." + m[1].str() + ".";
  const std::string rest = m[2].str();
  for (const NameRule& rule : kLayerRules) {
    if (rest == rule.hf) return prefix + rule.gguf;
  }
  std::smatch e;
  if (std::regex_match(rest, e, expert_re)) {
    *expert = std::stoll(e[1].str());
    return prefix + "ffn_" + e[2].str() + "_exps.weight";
  }
  return "";
}

Result<ModelWeights> load_gguf_weights(const ModelConfig& config, const std::string& path,
                                       const LoadProgress& on_progress,
                                       const WeightLoadOptions& options) {
  SS_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(path));
  std::shared_ptr<const MappedFile> mapping = file.owner();
  GgufSource source(std::move(file), config, options);
  auto weights = build_weights(config, source, on_progress);
  if (!weights.ok()) return errorf("{}: {}", path, weights.message());
  weights->mapping = std::move(mapping);
  return weights;
}

}  // namespace specstack

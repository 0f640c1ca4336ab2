// --quantization: HF checkpoints quantized at load (see weights.h).
#include <fmt/format.h>

#include "backend/cpu/quantize.h"
#include "model/quant_mix.h"
#include "model/weights.h"

namespace specstack {
namespace {

// Counts what each matrix became, for the fallback note.
struct QuantizeTally {
  int64_t q4_k_to_q8_0 = 0;  // rows not a multiple of 256 (Q4_K or Q6_K wanted)
  int64_t kept = 0;          // rows not a multiple of 32
  int64_t example_cols = 0;  // a row length of one fallback, for the note
};

// `w` as `want` where its rows allow, else the fallback.
void quantize_one(Tensor& w, DType want, QuantizeTally& tally) {
  if (w.dim() != 2 || w.numel() == 0 || dtype_is_quantized(w.dtype())) return;
  const int64_t cols = w.size(1);
  DType target = want;
  if (cols % dtype_block_elements(target) != 0) {
    tally.example_cols = cols;
    if (target != DType::kQ8_0 && cols % dtype_block_elements(DType::kQ8_0) == 0) {
      target = DType::kQ8_0;
      ++tally.q4_k_to_q8_0;
    } else {
      ++tally.kept;
      return;
    }
  }
  w = cpu::quantize_matrix(w, target);
}

}  // namespace

Result<WeightQuantization> parse_weight_quantization(const std::string& name) {
  if (name.empty() || name == "none") return WeightQuantization::kNone;
  if (name == "q8_0") return WeightQuantization::kQ8_0;
  if (name == "q4_k") return WeightQuantization::kQ4_K;
  if (name == "fp8") return WeightQuantization::kFp8;
  return errorf("unknown quantization '{}' (expected q8_0, q4_k or fp8)", name);
}

Result<ModelWeights> build_quantized_weights(const ModelConfig& config, WeightSource& source,
                                             WeightQuantization quantization,
                                             const LoadProgress& on_progress) {
  if (quantization == WeightQuantization::kNone) return build_weights(config, source, on_progress);
  if (quantization == WeightQuantization::kFp8) {
    return make_error("--quantization fp8 runs on --device cuda only (Hopper FP8 GEMMs)");
  }
  // Each matrix is quantized as the loader takes it, so the model's bf16
  // source (an mmap view or a dummy buffer) is dropped tensor by tensor and
  // never exists next to the whole quantized model.
  class QuantizingSource : public WeightSource {
   public:
    QuantizingSource(WeightSource& inner, QuantMixContext mix) : inner_(inner), mix_(mix) {}
    bool has(const std::string& name) const override { return inner_.has(name); }
    Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                       bool is_norm) override {
      SS_ASSIGN_OR_RETURN(Tensor t, inner_.get(name, shape, is_norm));
      if (shape.size() != 2 || ends_with(name, ".mlp.gate.weight")) return t;  // router
      quantize_one(t, quant_mix_type(name, mix_), tally_);
      return t;
    }
    const QuantizeTally& tally() const { return tally_; }

   private:
    static bool ends_with(const std::string& s, const std::string& tail) {
      return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
    }
    WeightSource& inner_;
    QuantMixContext mix_;
    QuantizeTally tally_;
  };
  QuantizingSource quantizing(
      source, QuantMixContext{quantization, config.n_layers, config.tie_word_embeddings});
  SS_ASSIGN_OR_RETURN(ModelWeights weights, build_weights(config, quantizing, on_progress));
  const QuantizeTally& tally = quantizing.tally();
  if (tally.q4_k_to_q8_0 > 0 || tally.kept > 0) {
    weights.load_note = fmt::format(
        "quantization: {} matrices with rows not a multiple of 256 are Q8_0 instead of Q4_K / "
        "Q6_K, {} "
        "with rows not a multiple of 32 keep their dtype (e.g. rows of {})",
        tally.q4_k_to_q8_0, tally.kept, tally.example_cols);
  }
  return weights;
}

}  // namespace specstack

// --quantization: HF checkpoints quantized at load (see weights.h).
#include <fmt/format.h>

#include "backend/cpu/quantize.h"
#include "model/weights.h"

namespace specstack {
namespace {

// Counts what each matrix became, for the fallback note.
struct QuantizeTally {
  int64_t q4_k_to_q8_0 = 0;  // rows not a multiple of 256
  int64_t kept = 0;          // rows not a multiple of 32
  int64_t example_cols = 0;  // a row length of one fallback, for the note
};

// `w` as `want` where its rows allow, else the fallback; bytes adjusted.
void quantize_one(Tensor& w, DType want, QuantizeTally& tally, size_t& bytes) {
  if (w.dim() != 2 || w.numel() == 0 || dtype_is_quantized(w.dtype())) return;
  const int64_t cols = w.size(1);
  DType target = want;
  if (cols % dtype_block_elements(target) != 0) {
    tally.example_cols = cols;
    if (target == DType::kQ4_K && cols % dtype_block_elements(DType::kQ8_0) == 0) {
      target = DType::kQ8_0;
      ++tally.q4_k_to_q8_0;
    } else {
      ++tally.kept;
      return;
    }
  }
  const size_t before = w.nbytes();
  w = cpu::quantize_matrix(w, target);
  bytes = bytes - before + w.nbytes();
}

}  // namespace

Result<WeightQuantization> parse_weight_quantization(const std::string& name) {
  if (name.empty() || name == "none") return WeightQuantization::kNone;
  if (name == "q8_0") return WeightQuantization::kQ8_0;
  if (name == "q4_k") return WeightQuantization::kQ4_K;
  return errorf("unknown quantization '{}' (expected q8_0 or q4_k)", name);
}

std::string quantize_weights(ModelWeights& weights, WeightQuantization quantization) {
  if (quantization == WeightQuantization::kNone) return "";
  const DType linear = quantization == WeightQuantization::kQ4_K ? DType::kQ4_K : DType::kQ8_0;
  QuantizeTally tally;
  size_t& bytes = weights.weight_bytes;
  const bool tied = weights.lm_head.numel() > 0 && weights.lm_head.raw() == weights.embed.raw();
  quantize_one(weights.embed, DType::kQ8_0, tally, bytes);
  if (tied) {
    weights.lm_head = weights.embed;
  } else {
    quantize_one(weights.lm_head, DType::kQ8_0, tally, bytes);
  }
  for (LayerWeights& layer : weights.layers) {
    for (Tensor* w :
         {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down}) {
      quantize_one(*w, linear, tally, bytes);
    }
    for (ExpertWeights& expert : layer.experts) {
      for (Tensor* w : {&expert.w_gate, &expert.w_up, &expert.w_down})
        quantize_one(*w, linear, tally, bytes);
    }
  }
  if (tally.q4_k_to_q8_0 == 0 && tally.kept == 0) return "";
  return fmt::format(
      "quantization: {} matrices with rows not a multiple of 256 are Q8_0 instead of Q4_K, {} "
      "with rows not a multiple of 32 keep their dtype (e.g. rows of {})",
      tally.q4_k_to_q8_0, tally.kept, tally.example_cols);
}

}  // namespace specstack

#include "model/cpu_weight_layout.h"

#include "backend/cpu/quant_panels.h"

namespace specstack {
namespace {

// Replaces w by its panel copy when it fits, and releases the file pages it
// was a view of. A tied embedding table reads the same pages, but only the
// rows of the tokens it meets: those fault back in (the file is unchanged).
bool to_panels(Tensor& w, ThreadPool& pool, const MappedFile* mapping) {
  if (!cpu::q8_0_panels_fit(w)) return false;
  Tensor packed = cpu::repack_q8_0_panels(pool, w);
  // A view of the model file: drop the pages it was read from.
  if (mapping != nullptr) mapping->release(w.raw(), dtype_bytes(w.dtype(), w.numel()));
  w = std::move(packed);
  return true;
}

}  // namespace

int64_t lay_out_q8_0_panels(ModelWeights& weights, ThreadPool& pool) {
  const MappedFile* mapping = weights.mapping.get();
  int64_t n = 0;
  for (LayerWeights& layer : weights.layers) {
    for (Tensor* w :
         {&layer.wq, &layer.wk, &layer.wv, &layer.wo, &layer.w_gate, &layer.w_up, &layer.w_down}) {
      n += to_panels(*w, pool, mapping) ? 1 : 0;
    }
    for (ExpertWeights& expert : layer.experts) {
      for (Tensor* w : {&expert.w_gate, &expert.w_up, &expert.w_down})
        n += to_panels(*w, pool, mapping) ? 1 : 0;
    }
  }
  // A tied table is the LM head's panels too: embedding lookups dequantize
  // their rows from them (cpu::dequantize_rows), so one copy serves both.
  const bool tied = weights.embed.raw() == weights.lm_head.raw();
  if (to_panels(weights.lm_head, pool, mapping)) {
    ++n;
    if (tied) weights.embed = weights.lm_head;
  }
  return n;
}

int64_t lay_out_cpu_weights(ModelWeights& weights, ThreadPool& pool) {
  return cpu::quant_panels_enabled() ? lay_out_q8_0_panels(weights, pool) : 0;
}

int64_t lay_out_cpu_weights(ModelWeights& weights, ThreadPool& pool, CpuWeightLayout layout) {
  switch (layout) {
    case CpuWeightLayout::kAsStored:
      return 0;
    case CpuWeightLayout::kPanels:
      return lay_out_q8_0_panels(weights, pool);
    default:
      return lay_out_cpu_weights(weights, pool);
  }
}

}  // namespace specstack

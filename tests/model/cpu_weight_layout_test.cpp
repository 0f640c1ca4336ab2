// The CPU layout pass (model/cpu_weight_layout.h): which matrices become
// Q8_0 panels, a tied embedding table becoming the LM head's panels with
// the same rows, and kAsStored / kAuto.
#include "model/cpu_weight_layout.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_elementwise.h"
#include "backend/cpu/quant_panels.h"
#include "backend/cpu/quantize.h"

namespace specstack {
namespace {

Tensor random_q8_0(std::mt19937& rng, int64_t rows, int64_t cols) {
  Tensor f = Tensor::zeros(DType::kF32, {rows, cols});
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) f.f32()[i] = dist(rng);
  return cpu::quantize_matrix(f, DType::kQ8_0);
}

// A tied table [48, 64]; one layer whose wk has 8 rows (not a panel).
ModelWeights tiny_weights(std::mt19937& rng) {
  ModelWeights w;
  w.embed = random_q8_0(rng, 48, 64);
  w.lm_head = w.embed;
  LayerWeights layer;
  layer.wq = random_q8_0(rng, 64, 64);
  layer.wk = random_q8_0(rng, 8, 64);
  layer.wv = random_q8_0(rng, 16, 64);
  layer.wo = random_q8_0(rng, 64, 64);
  layer.w_gate = random_q8_0(rng, 32, 64);
  layer.w_up = random_q8_0(rng, 32, 64);
  layer.w_down = random_q8_0(rng, 64, 32);
  w.layers.push_back(layer);
  return w;
}

std::vector<float> embed_rows(const Tensor& table, const std::vector<int32_t>& ids) {
  ThreadPool pool(1);
  Tensor out = Tensor::zeros(DType::kF32, {int64_t(ids.size()), table.size(1)});
  cpu::embedding(pool, table, ids, out);
  return std::vector<float>(out.f32(), out.f32() + out.numel());
}

TEST(CpuWeightLayout, PanelsWhereRowsFitAndTiedTableSharesThem) {
  std::mt19937 rng(28);
  ModelWeights w = tiny_weights(rng);
  const std::vector<int32_t> ids = {0, 5, 17, 47};
  const std::vector<float> before = embed_rows(w.embed, ids);
  ThreadPool pool(2);
  EXPECT_EQ(lay_out_cpu_weights(w, pool, CpuWeightLayout::kPanels), 7);  // all but wk
  const LayerWeights& l = w.layers[0];
  for (const Tensor* t :
       std::vector<const Tensor*>{&l.wq, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &w.lm_head})
    EXPECT_EQ(t->dtype(), DType::kQ8_0P);
  EXPECT_EQ(l.wk.dtype(), DType::kQ8_0);
  EXPECT_EQ(w.embed.raw(), w.lm_head.raw());  // still one copy
  EXPECT_EQ(embed_rows(w.embed, ids), before);
}

TEST(CpuWeightLayout, UntiedTableStaysAsStored) {
  std::mt19937 rng(29);
  ModelWeights w = tiny_weights(rng);
  w.lm_head = random_q8_0(rng, 48, 64);
  ThreadPool pool(1);
  EXPECT_EQ(lay_out_q8_0_panels(w, pool), 7);
  EXPECT_EQ(w.embed.dtype(), DType::kQ8_0);
  EXPECT_EQ(w.lm_head.dtype(), DType::kQ8_0P);
}

TEST(CpuWeightLayout, AsStoredAndAutoFollowTheCpu) {
  std::mt19937 rng(30);
  ThreadPool pool(1);
  ModelWeights stored = tiny_weights(rng);
  EXPECT_EQ(lay_out_cpu_weights(stored, pool, CpuWeightLayout::kAsStored), 0);
  EXPECT_EQ(stored.layers[0].wq.dtype(), DType::kQ8_0);
  ModelWeights automatic = tiny_weights(rng);
  EXPECT_EQ(lay_out_cpu_weights(automatic, pool, CpuWeightLayout::kAuto),
            cpu::quant_panels_enabled() ? 7 : 0);
}

}  // namespace
}  // namespace specstack

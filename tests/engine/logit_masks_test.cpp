// LogitMasks (model/logit_masks.h): the plan's grammar bitmasks, and a host
// model's argmax under them (ModelRunner with tokens_on_device), which must
// pick what the host sampler picks from logits masked to -inf, whether the
// plan brings the masks or fills them late (StepPlan::fill_masks).
#include "model/logit_masks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_backend.h"
#include "engine/model_instance.h"
#include "golden_run.h"
#include "test_util.h"

namespace specstack {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void admit(std::span<uint32_t> bits, int32_t token) {
  bits[size_t(token) / 32] |= 1u << (token % 32);
}

TEST(LogitMasks, AddDropAndAdmits) {
  LogitMasks masks;
  masks.reset(3, 70);  // 3 words a row
  EXPECT_EQ(masks.words_per_row, 3);
  EXPECT_TRUE(masks.empty());
  std::span<uint32_t> a = masks.add(2);
  std::fill(a.begin(), a.end(), 0u);
  admit(a, 5);
  admit(a, 69);
  std::span<uint32_t> b = masks.add(0);
  std::fill(b.begin(), b.end(), ~0u);
  masks.drop_last(0);  // row 0 turned out unconstrained
  EXPECT_EQ(masks.n_masks(), 1);
  EXPECT_EQ(masks.row_mask, (std::vector<int32_t>{-1, -1, 0}));
  EXPECT_TRUE(masks.admits(2, 5));
  EXPECT_TRUE(masks.admits(2, 69));
  EXPECT_FALSE(masks.admits(2, 6));
  EXPECT_FALSE(masks.admits(2, 96));  // beyond the words: never
  EXPECT_TRUE(masks.admits(0, 6));    // unmasked rows admit everything
  EXPECT_TRUE(masks.admits(1, 1000));
  masks.reset(1, 70);  // the next step starts clean
  EXPECT_TRUE(masks.empty());
  EXPECT_EQ(masks.row_mask, (std::vector<int32_t>{-1}));
}

TEST(LogitMasks, MaskedArgmaxIsTheSamplersGreedyOnMaskedLogits) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> logits = {1.0f, 9.0f, 3.0f, 3.0f, nan, 2.0f, 9.0f, -kInf};
  LogitMasks masks;
  masks.reset(2, int64_t(logits.size()));
  std::span<uint32_t> bits = masks.add(1);
  bits[0] = 0;
  for (int32_t t : {0, 2, 3, 4, 5}) admit(bits, t);  // both 9s masked
  const auto vocab = int64_t(logits.size());
  EXPECT_EQ(masked_argmax(logits.data(), vocab, nullptr, 0), 1);  // no masks: the first max
  EXPECT_EQ(masked_argmax(logits.data(), vocab, &masks, 0), 1);   // an unmasked row
  EXPECT_EQ(masked_argmax(logits.data(), vocab, &masks, 1), 2);   // ties: the lowest id; NaN loses
  bits[0] = 0;
  admit(bits, 7);  // only a -inf token admitted: 0, as the host sampler (the grammar refuses it)
  EXPECT_EQ(masked_argmax(logits.data(), vocab, &masks, 1), 0);
  bits[0] = 0;  // nothing admitted
  EXPECT_EQ(masked_argmax(logits.data(), vocab, &masks, 1), 0);
}

// A host model asked for greedy tokens under masks: the unmasked row takes
// the argmax, a row whose argmax (and more) is masked the best admitted token.
TEST(LogitMasks, HostModelRunnerHonoursTheMasks) {
  CpuBackend backend(CpuBackendOptions{1});
  ModelInstanceOptions options;
  options.kv_tokens = 1024;
  auto model = testing::load_golden_model("llama-gqa", backend, options);
  const std::vector<int32_t> prompt = {5, 17, 200, 33, 8, 91, 4};
  const auto n = static_cast<int32_t>(prompt.size());
  // One plan with `n_seqs` copies of the prompt, each wanting its last row's logits.
  // late: the masks come from plan.fill_masks, which must run exactly once.
  auto run = [&](int32_t n_seqs, bool greedy, const LogitMasks* masks, bool late = false) {
    std::vector<KvSequence> seqs;
    StepPlan plan;
    for (int32_t s = 0; s < n_seqs; ++s) {
      seqs.push_back(model->kv_manager().new_sequence());
      const int32_t first = model->kv_manager().append(seqs.back(), n);
      for (int32_t j = 0; j < n; ++j)
        plan.add_token(prompt[size_t(j)], j, s, first + j, j == n - 1);
      plan.block_tables.push_back(seqs.back().blocks());
      plan.seq_n_slots.push_back(seqs.back().n_slots());
    }
    plan.tokens_on_device = greedy;
    int calls = 0;
    if (masks != nullptr && late) {
      plan.fill_masks = [&] {
        ++calls;
        plan.masks = *masks;
      };
    } else if (masks != nullptr) {
      plan.masks = *masks;
    }
    StepOutput out = model->runner().run(plan);
    EXPECT_EQ(calls, late ? 1 : 0);
    for (KvSequence& s : seqs) model->kv_manager().free(s);
    return out;
  };
  const StepOutput plain = run(1, false, nullptr);
  const int64_t vocab = plain.logits.size(1);
  std::vector<float> masked(plain.logits.f32(), plain.logits.f32() + vocab);
  LogitMasks masks;
  masks.reset(2, vocab);
  std::span<uint32_t> bits = masks.add(1);
  std::fill(bits.begin(), bits.end(), ~0u);
  for (int k = 0; k < 3; ++k) {  // mask the three best tokens
    const auto top =
        static_cast<int32_t>(std::max_element(masked.begin(), masked.end()) - masked.begin());
    bits[size_t(top) / 32] &= ~(1u << (top % 32));
    masked[size_t(top)] = -kInf;
  }
  const auto want =
      static_cast<int32_t>(std::max_element(masked.begin(), masked.end()) - masked.begin());
  const StepOutput out = run(2, true, &masks);
  ASSERT_EQ(out.picked_tokens.size(), 2u);
  EXPECT_EQ(out.picked_tokens[0], testing::argmax(plain.logits.f32(), vocab));
  EXPECT_EQ(out.picked_tokens[1], want);
  EXPECT_NE(out.picked_tokens[1], out.picked_tokens[0]);
  // The same masks made late (the engine's way: while the forward runs).
  EXPECT_EQ(run(2, true, &masks, true).picked_tokens, out.picked_tokens);
}

}  // namespace
}  // namespace specstack

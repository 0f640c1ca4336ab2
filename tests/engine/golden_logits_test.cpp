// Every architecture against HF transformers reference logits (tests/data/golden):
// prefill logits, argmax, greedy continuations, sparse prefill at original
// positions, and RoPE frequencies. Tolerances follow golden/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "engine/model_instance.h"
#include "golden_reference.h"
#include "golden_run.h"
#include "model/transformer.h"
#include "tail_rows_scenario.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::argmax;
using testing::golden_model_dir;
using testing::GoldenReference;
using testing::relative_error;

constexpr double kLogitTolerance = 1e-4;     // per position, ‖ours−ref‖/‖ref‖
constexpr float kArgmaxMarginFloor = 1e-3f;  // compare argmax only where the reference is decisive

struct GoldenCase {
  std::string model;
  std::vector<std::string> prompts;
};

class GoldenModel {
 public:
  explicit GoldenModel(const std::string& name)
      : backend_(CpuBackendOptions{2}),
        reference_(golden_model_dir(name) + "/reference.safetensors") {
    ModelInstanceOptions options;
    options.kv_tokens = 4096;
    instance_ = testing::load_golden_model(name, backend_, options);
  }
  ModelInstance& instance() { return *instance_; }
  const GoldenReference& reference() const { return reference_; }

  using Run = testing::GoldenRun;
  Run run(const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
          int32_t next_position, int n_greedy, int32_t chunk) {
    return testing::prefill_then_greedy(*instance_, ids, positions, next_position, n_greedy, chunk);
  }

 private:
  CpuBackend backend_;
  GoldenReference reference_;
  std::unique_ptr<ModelInstance> instance_;
};

std::vector<int32_t> iota_positions(size_t n, int32_t start = 0) {
  std::vector<int32_t> positions(n);
  std::iota(positions.begin(), positions.end(), start);
  return positions;
}

// Compares rows of ours [n_rows, vocab] against ref rows, plus argmax where decisive.
void expect_rows_match(const std::string& what, const float* ours, const Tensor& ref,
                       const float* margins, const int32_t* ref_argmax, int64_t vocab) {
  const int64_t n_rows = ref.size(0);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* a = ours + r * vocab;
    const float* b = ref.f32() + r * vocab;
    EXPECT_LE(relative_error(a, b, vocab), kLogitTolerance) << what << " row " << r;
    if (ref_argmax != nullptr && margins[r] > kArgmaxMarginFloor) {
      EXPECT_EQ(argmax(a, vocab), ref_argmax[r]) << what << " argmax row " << r;
    }
  }
}

class GoldenLogitsTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenLogitsTest, PrefillLogitsArgmaxAndGreedyMatchReference) {
  const GoldenCase& param = GetParam();
  GoldenModel model(param.model);
  const GoldenReference& ref = model.reference();
  const int64_t vocab = model.instance().config().vocab_size;
  for (const std::string& p : param.prompts) {
    SCOPED_TRACE(param.model + " " + p);
    const std::vector<int32_t> ids = ref.ids(p + ".input_ids");
    const auto n = static_cast<int64_t>(ids.size());
    // Odd chunk sizes exercise chunked prefill across block boundaries.
    GoldenModel::Run run =
        model.run(ids, iota_positions(ids.size()), static_cast<int32_t>(n), 16, 100);
    const Tensor& logits = ref.get(p + ".logits");  // [L, V] or the last 4 rows
    const int64_t first_row = n - logits.size(0);
    const Tensor& margins = ref.get(p + ".argmax_margin");
    std::vector<int32_t> ref_argmax = ref.ids(p + ".argmax");
    expect_rows_match("prefill", run.prefill_logits.data() + first_row * vocab, logits,
                      margins.f32() + first_row, ref_argmax.data() + first_row, vocab);
    for (int64_t i = 0; i < n; ++i) {
      if (margins.f32()[i] > kArgmaxMarginFloor) {
        EXPECT_EQ(argmax(run.prefill_logits.data() + i * vocab, vocab), ref_argmax[i])
            << "position " << i;
      }
    }
    EXPECT_EQ(run.greedy, ref.ids(p + ".greedy"));
    expect_rows_match("greedy", run.greedy_logits.data(), ref.get(p + ".greedy_logits"), nullptr,
                      nullptr, vocab);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, GoldenLogitsTest,
                         ::testing::Values(GoldenCase{"llama-gqa", {"p0", "p1", "p2", "p3"}},
                                           GoldenCase{"llama3-rope", {"p0", "p1", "p2", "p3"}},
                                           GoldenCase{"qwen2", {"p0", "p1", "p2"}},
                                           GoldenCase{"qwen3", {"p0", "p1", "p2"}},
                                           GoldenCase{"mistral-swa", {"p0", "p1", "p2", "p3"}},
                                           GoldenCase{"qwen3-moe", {"p0", "p1", "p2"}}),
                         [](const auto& info) {
                           return testing::test_name_part(info.param.model);
                         });

class GoldenSparseTest : public ::testing::TestWithParam<std::string> {};

// Kept tokens prefilled at their ORIGINAL positions, slots 0..108, causal by
// slot order; decode continues at position 333 from slot 109.
TEST_P(GoldenSparseTest, SparsePrefillAtOriginalPositionsMatchesReference) {
  GoldenModel model(GetParam());
  const GoldenReference& ref = model.reference();
  const int64_t vocab = model.instance().config().vocab_size;
  const std::vector<int32_t> ids = ref.ids("sparse.input_ids");
  const std::vector<int32_t> kept = ref.ids("sparse.kept");
  ASSERT_EQ(ids.size(), 109u);
  GoldenModel::Run run = model.run(ids, kept, 333, 8, 50);
  expect_rows_match("sparse prefill", run.prefill_logits.data(), ref.get("sparse.logits"), nullptr,
                    nullptr, vocab);
  EXPECT_EQ(run.greedy, ref.ids("sparse.greedy"));
  expect_rows_match("sparse greedy", run.greedy_logits.data(), ref.get("sparse.greedy_logits"),
                    nullptr, nullptr, vocab);
}

INSTANTIATE_TEST_SUITE_P(Architectures, GoldenSparseTest, ::testing::Values("llama-gqa", "qwen3"),
                         [](const auto& info) { return testing::test_name_part(info.param); });

TEST(GoldenRope, InverseFrequenciesMatchTransformers) {
  for (const char* name :
       {"llama-gqa", "llama3-rope", "qwen2", "qwen3", "mistral-swa", "qwen3-moe"}) {
    SCOPED_TRACE(name);
    GoldenModel model(name);
    const Tensor& ref = model.reference().get("rope.inv_freq");
    const Tensor& ours = model.instance().model().rope_inv_freq();
    ASSERT_EQ(ours.numel(), ref.numel());
    for (int64_t j = 0; j < ref.numel(); ++j) {
      EXPECT_NEAR(ours.f32()[j], ref.f32()[j], 2e-7 * std::abs(ref.f32()[j])) << "j=" << j;
    }
  }
}

TEST(GoldenTinyStories, RealModelLogitsAndGreedyMatchReference) {
  GoldenModel model("tinystories-656k");
  const GoldenReference& ref = model.reference();
  const int64_t vocab = model.instance().config().vocab_size;
  for (const char* t : {"t0", "t1", "t2"}) {
    SCOPED_TRACE(t);
    const std::string p = t;
    const std::vector<int32_t> ids = ref.ids(p + ".input_ids");
    GoldenModel::Run run =
        model.run(ids, iota_positions(ids.size()), static_cast<int32_t>(ids.size()), 32, 5);
    std::vector<int32_t> ref_argmax = ref.ids(p + ".argmax");
    expect_rows_match("prefill", run.prefill_logits.data(), ref.get(p + ".logits"), nullptr,
                      nullptr, vocab);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(argmax(run.prefill_logits.data() + i * vocab, vocab), ref_argmax[i]);
    }
    EXPECT_EQ(run.greedy, ref.ids(p + ".greedy"));
  }
}

// The last layer past its K/V write runs for the logit rows alone
// (Transformer::forward's tail): the last prompt row's logits (and those of
// a decode row of another sequence in the same step) equal a prefill that
// wants every row's to f32 rounding (the last layer's matmuls run on fewer
// rows), and the decode steps after it give the same logits bit for bit:
// every layer's K/V is written for every row either way. Chunks of 128 and
// 100 (a final chunk of 44 and of 90 rows); qwen3-moe's last layer is MoE,
// which keeps every row.
TEST(GoldenTail, LastLayerForLogitRowsAloneEqualsEveryRow) {
  CpuBackend backend(CpuBackendOptions{2});
  for (const std::string& name : testing::golden_architectures()) {
    ModelInstanceOptions options;
    options.kv_tokens = 4096;
    auto model = testing::load_golden_model(name, backend, options);
    auto* transformer = dynamic_cast<Transformer*>(&model->model());
    ASSERT_NE(transformer, nullptr);
    const int64_t vocab = model->config().vocab_size;
    const bool moe_last = model->config().layer_is_moe(model->config().n_layers - 1);
    struct Shape {
      int32_t n_a, chunk;
      bool with_b;
    };
    for (const Shape& s : {Shape{300, 128, false}, Shape{300, 128, true}, Shape{90, 100, true}}) {
      SCOPED_TRACE(::testing::Message() << name << " prompt " << s.n_a << " chunk " << s.chunk
                                        << (s.with_b ? " with a decode row" : ""));
      const int64_t before = transformer->tail_steps();
      const testing::TailRun tail = testing::run_tail_scenario(*model, s.n_a, s.chunk, s.with_b,
                                                               /*every_row=*/false);
      EXPECT_EQ(transformer->tail_steps() > before, !moe_last);
      const int64_t before_every = transformer->tail_steps();
      const testing::TailRun every = testing::run_tail_scenario(*model, s.n_a, s.chunk, s.with_b,
                                                                /*every_row=*/true);
      EXPECT_EQ(transformer->tail_steps(), before_every);  // every row wants logits
      ASSERT_EQ(tail.a_last.size(), size_t(vocab));
      ASSERT_EQ(tail.b_rows.size(), every.b_rows.size());
      EXPECT_LE(relative_error(tail.a_last.data(), every.a_last.data(), vocab), 1e-5);
      for (size_t r = 0; r * vocab < tail.b_rows.size(); ++r) {
        EXPECT_LE(
            relative_error(tail.b_rows.data() + r * vocab, every.b_rows.data() + r * vocab, vocab),
            1e-5)
            << "decode row " << r;
      }
      EXPECT_EQ(tail.a_decode, every.a_decode) << "the K/V after the prefill differ";
    }
  }
}

}  // namespace
}  // namespace specstack

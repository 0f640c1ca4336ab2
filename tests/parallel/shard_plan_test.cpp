// ShardPlan and ShardedWeightSource: every golden architecture at N = 1, 2,
// 4, 8 (the shapes add up, KV heads go to the ranks whose q heads use them,
// rank slices of real checkpoints reassemble the full tensors), and the
// one-line errors for models that cannot be split N ways.
#include "parallel/shard_plan.h"

#include <gtest/gtest.h>

#include <cstring>

#include "parallel/sharded_weight_source.h"
#include "test_util.h"

namespace specstack {
namespace {

const char* const kGoldenModels[] = {"llama-gqa", "llama3-rope", "mistral-swa",     "qwen2",
                                     "qwen3",     "qwen3-moe",   "tinystories-656k"};

ModelConfig golden_config(const std::string& name) {
  auto config = load_model_config(testing::golden_model_dir(name));
  SS_CHECK_MSG(config.ok(), config.ok() ? "" : config.message());
  return *config;
}

TEST(ShardPlan, RankShapesAddUpForEveryGoldenArchitecture) {
  for (const char* name : kGoldenModels) {
    const ModelConfig config = golden_config(name);
    for (int64_t n : {1, 2, 4, 8}) {
      SCOPED_TRACE(std::string(name) + " N=" + std::to_string(n));
      auto plan = ShardPlan::make(config, n);
      if (config.n_heads % n != 0) {  // the one reason a golden model cannot split
        ASSERT_FALSE(plan.ok());
        EXPECT_NE(plan.message().find("does not divide the " + std::to_string(config.n_heads) +
                                      " attention heads"),
                  std::string::npos)
            << plan.message();
        continue;
      }
      ASSERT_TRUE(plan.ok()) << plan.message();
      int64_t heads = 0;
      int64_t vocab = 0;
      for (int64_t r = 0; r < n; ++r) {
        const RankShape s = plan->rank_shape(r);
        EXPECT_EQ(s.vocab_begin, vocab);  // contiguous vocab slices in rank order
        heads += s.n_heads;
        vocab += s.vocab_count;
        EXPECT_GT(s.vocab_count, 0);
        EXPECT_LE(s.vocab_count, plan->vocab_chunk());
        EXPECT_EQ(s.intermediate * n, config.intermediate_size);
        EXPECT_EQ(s.expert_intermediate * n, config.moe.expert_intermediate_size);
        // Each of the rank's q heads uses a KV head the rank holds.
        const int64_t group = config.n_heads / config.n_kv_heads;
        for (int64_t h = r * s.n_heads; h < (r + 1) * s.n_heads; ++h) {
          const int64_t kv = h / group;
          EXPECT_GE(kv, s.kv_head_begin);
          EXPECT_LT(kv, s.kv_head_begin + s.n_kv_heads);
        }
        // And the rank-local GQA grouping maps local q head i to local KV head
        // i / (heads / kv heads): the same global head as above.
        const int64_t local_group = s.n_heads / s.n_kv_heads;
        for (int64_t i = 0; i < s.n_heads; ++i) {
          EXPECT_EQ(s.kv_head_begin + i / local_group, (r * s.n_heads + i) / group);
        }
        const ModelConfig rc = plan->rank_config(r);
        EXPECT_EQ(rc.n_heads, s.n_heads);
        EXPECT_EQ(rc.n_kv_heads, s.n_kv_heads);
        EXPECT_EQ(rc.vocab_size, s.vocab_count);
        EXPECT_EQ(rc.head_dim, config.head_dim);
        EXPECT_EQ(rc.hidden_size, config.hidden_size);
      }
      EXPECT_EQ(heads, config.n_heads);
      EXPECT_EQ(vocab, config.vocab_size);
      EXPECT_EQ(plan->kv_replicated(), config.n_kv_heads < n);
    }
  }
}

TEST(ShardPlan, ReplicatesKvHeadsWhenFewerThanRanks) {
  const ModelConfig gqa = golden_config("llama-gqa");  // 8 q heads, 2 KV heads
  auto four = ShardPlan::make(gqa, 4);
  ASSERT_TRUE(four.ok());
  EXPECT_TRUE(four->kv_replicated());
  const int64_t expect4[] = {0, 0, 1, 1};
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(four->rank_shape(r).n_kv_heads, 1);
    EXPECT_EQ(four->rank_shape(r).kv_head_begin, expect4[r]) << r;
  }
  auto two = ShardPlan::make(gqa, 2);  // split, not replicated
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(two->kv_replicated());
  EXPECT_EQ(two->rank_shape(1).kv_head_begin, 1);
  const ModelConfig tiny = golden_config("tinystories-656k");  // 8 q heads, 4 KV heads
  auto eight = ShardPlan::make(tiny, 8);
  ASSERT_TRUE(eight.ok());
  for (int64_t r = 0; r < 8; ++r) EXPECT_EQ(eight->rank_shape(r).kv_head_begin, r / 2);
  // The k_proj rows rank 5 takes: KV head 2's.
  const TensorShard k = eight->tensor_shard("model.layers.0.self_attn.k_proj.weight", 5);
  EXPECT_EQ(k.axis, 0);
  EXPECT_EQ(k.begin, 2 * tiny.head_dim);
  EXPECT_EQ(k.count, tiny.head_dim);
}

TEST(ShardPlan, TensorRulesByName) {
  const ModelConfig moe = golden_config("qwen3-moe");
  auto plan = ShardPlan::make(moe, 2);
  ASSERT_TRUE(plan.ok());
  auto shard = [&](const std::string& name) { return plan->tensor_shard(name, 1); };
  EXPECT_EQ(shard("model.layers.1.self_attn.q_proj.weight").axis, 0);
  EXPECT_EQ(shard("model.layers.1.self_attn.o_proj.weight").axis, 1);
  EXPECT_EQ(shard("model.layers.1.self_attn.o_proj.weight").begin, 2 * moe.head_dim);
  EXPECT_EQ(shard("model.layers.1.mlp.experts.3.gate_proj.weight").count, 32);  // 64 / 2
  EXPECT_EQ(shard("model.layers.1.mlp.experts.3.down_proj.weight").axis, 1);
  EXPECT_EQ(shard("model.layers.1.mlp.gate.weight").axis, -1);  // the router: replicated
  EXPECT_EQ(shard("model.layers.1.self_attn.q_norm.weight").axis, -1);
  EXPECT_EQ(shard("model.layers.1.input_layernorm.weight").axis, -1);
  EXPECT_EQ(shard("model.norm.weight").axis, -1);
  EXPECT_EQ(shard("lm_head.weight").begin, 256);
  EXPECT_EQ(shard("model.embed_tokens.weight").count, 256);
}

TEST(ShardPlan, ErrorsNameTheReason) {
  ModelConfig c = golden_config("llama-gqa");  // 8 heads, 2 KV heads, intermediate 344, vocab 512
  auto message = [&](int64_t n) {
    auto plan = ShardPlan::make(c, n);
    return plan.ok() ? std::string("ok") : plan.message();
  };
  EXPECT_NE(message(0).find("must be at least 1"), std::string::npos);
  EXPECT_NE(message(3).find("does not divide the 8 attention heads"), std::string::npos);
  c.n_heads = 12;
  c.n_kv_heads = 4;
  EXPECT_NE(message(6).find("the 4 KV heads can neither be split 6 ways"), std::string::npos)
      << message(6);
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.intermediate_size = 100;
  EXPECT_NE(message(8).find("does not divide the MLP intermediate size 100"), std::string::npos);
  c.intermediate_size = 344;
  c.vocab_size = 5;
  EXPECT_NE(message(4).find("vocabulary of 5 rows leaves a rank with none"), std::string::npos);
  ModelConfig moe = golden_config("qwen3-moe");
  moe.moe.expert_intermediate_size = 62;
  auto plan = ShardPlan::make(moe, 4);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.message().find("expert intermediate size 62"), std::string::npos);
  // Uneven vocab is fine: ceil(513 / 2) rows, the last rank one fewer.
  c.vocab_size = 513;
  auto uneven = ShardPlan::make(c, 2);
  ASSERT_TRUE(uneven.ok());
  EXPECT_EQ(uneven->vocab_chunk(), 257);
  EXPECT_EQ(uneven->rank_shape(1).vocab_count, 256);
}

// Rank slices of a real checkpoint put back together equal the full tensor,
// for a row split (q_proj, embed) and a column split (o_proj, down_proj).
TEST(ShardedWeightSource, RankSlicesReassembleTheFullTensors) {
  for (const char* name : {"llama-gqa", "qwen2", "qwen3-moe"}) {
    SCOPED_TRACE(name);
    const ModelConfig config = golden_config(name);
    auto full = open_safetensors_source(testing::golden_model_dir(name));
    ASSERT_TRUE(full.ok()) << full.message();
    const int64_t n = 2;
    auto plan = ShardPlan::make(config, n);
    ASSERT_TRUE(plan.ok());
    const int64_t hidden = config.hidden_size;
    const int64_t q = config.n_heads * config.head_dim;
    const std::string mlp_down = config.moe.n_experts > 0
                                     ? "model.layers.0.mlp.experts.1.down_proj.weight"
                                     : "model.layers.0.mlp.down_proj.weight";
    const int64_t inter =
        config.moe.n_experts > 0 ? config.moe.expert_intermediate_size : config.intermediate_size;
    struct Case {
      std::string tensor;
      std::vector<int64_t> shape;
      int axis;
    };
    const std::string embed =
        (*full)->has("model.embed_tokens.weight") ? "model.embed_tokens.weight" : "lm_head.weight";
    for (const Case& c : {Case{"model.layers.0.self_attn.q_proj.weight", {q, hidden}, 0},
                          Case{embed, {config.vocab_size, hidden}, 0},
                          Case{"model.layers.0.self_attn.o_proj.weight", {hidden, q}, 1},
                          Case{mlp_down, {hidden, inter}, 1}}) {
      SCOPED_TRACE(c.tensor);
      auto whole = (*full)->get(c.tensor, c.shape, false);
      ASSERT_TRUE(whole.ok()) << whole.message();
      const size_t elem = dtype_size(whole->dtype());
      int64_t offset = 0;
      for (int64_t r = 0; r < n; ++r) {
        ShardedWeightSource source(**full, *plan, r);
        const TensorShard s = plan->tensor_shard(c.tensor, r);
        ASSERT_EQ(s.axis, c.axis);
        EXPECT_EQ(s.begin, offset);
        std::vector<int64_t> shape = c.shape;
        shape[static_cast<size_t>(c.axis)] = s.count;
        auto part = source.get(c.tensor, shape, false);
        ASSERT_TRUE(part.ok()) << part.message();
        ASSERT_EQ(part->shape(), shape);
        const auto* a = static_cast<const uint8_t*>(part->raw());
        const auto* b = static_cast<const uint8_t*>(whole->raw());
        for (int64_t row = 0; row < shape[0]; ++row) {
          const int64_t src_row = c.axis == 0 ? s.begin + row : row;
          const int64_t src_col = c.axis == 1 ? s.begin : 0;
          ASSERT_EQ(0, std::memcmp(a + static_cast<size_t>(row * shape[1]) * elem,
                                   b + static_cast<size_t>(src_row * c.shape[1] + src_col) * elem,
                                   static_cast<size_t>(shape[1]) * elem))
              << "rank " << r << " row " << row;
        }
        offset += s.count;
      }
      EXPECT_EQ(offset, c.shape[static_cast<size_t>(c.axis)]);
    }
  }
}

TEST(ShardedWeightSource, DummyRowSlicesMatchTheFullTensor) {
  const ModelConfig config = golden_config("llama-gqa");
  auto plan = ShardPlan::make(config, 4);
  ASSERT_TRUE(plan.ok());
  auto dummy = make_dummy_source(DType::kBF16, 7);
  ShardedWeightSource source(*dummy, *plan, 3);
  const int64_t rows = config.vocab_size / 4;
  auto part = source.get("model.embed_tokens.weight", {rows, config.hidden_size}, false);
  ASSERT_TRUE(part.ok());
  auto whole =
      dummy->get("model.embed_tokens.weight", {config.vocab_size, config.hidden_size}, false);
  ASSERT_TRUE(whole.ok());
  // The values of rows [3/4 vocab, vocab) of the full tensor.
  EXPECT_EQ(0, std::memcmp(part->raw(),
                           static_cast<const uint8_t*>(whole->raw()) + whole->nbytes() / 4 * 3,
                           part->nbytes()));
  EXPECT_EQ(part->nbytes(), whole->nbytes() / 4);
}

TEST(ShardedWeightSource, CopySliceRejectsColumnsOfBlockQuantizedTensors) {
  Tensor q8 = Tensor::zeros(DType::kQ8_0, {4, 64});
  EXPECT_TRUE(copy_slice(q8, 0, 1, 2).ok());
  auto cols = copy_slice(q8, 1, 0, 32);
  ASSERT_FALSE(cols.ok());
  EXPECT_NE(cols.message().find("block-quantized"), std::string::npos);
}

}  // namespace
}  // namespace specstack

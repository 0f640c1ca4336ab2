// Speculative decoding for grammar-constrained requests (engine/grammar_stage.h,
// engine/specdecode_stage.h): the draft proposes only admitted tokens, each
// verification row is masked with the parser state after the draft tokens
// before it, and drafting stops where the document is complete. Greedy
// output equals constrained greedy without a draft token for token (with the
// model itself as the draft, which accepts nearly everything and so ends
// documents inside accepted runs, and with another model, which rejects
// often); sampled output validates and is reproducible by seed; logprobs
// stay the target's unmasked ones; every KV block comes back. On the
// llama-gqa golden model with the 512-token byte-level JSON tokenizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "chi_square.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "golden_run.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/schema_check.h"
#include "grammar_test_schemas.h"
#include "json_bytes_grammar.h"
#include "sampling_law.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

const auto& kSchemas = testing::kGrammarTestSchemas;

struct Fixture {
  CpuBackend backend{CpuBackendOptions{2}};
  std::unique_ptr<ModelInstance> target;
  std::unique_ptr<ModelInstance> self_draft;   // the same weights: accepts nearly all
  std::unique_ptr<ModelInstance> other_draft;  // another model: rejects often
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 32 * 1024;
    fx->target = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->self_draft = testing::load_golden_model("llama-gqa", fx->backend, options);
    fx->other_draft = testing::load_golden_model("llama3-rope", fx->backend, options);
    testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
    fx->tokenizer = std::move(v.tokenizer);
    fx->vocabulary = std::move(v.vocabulary);
    return fx;
  }();
  return *f;
}

std::shared_ptr<grammar::TokenConstraint> constraint_for(const char* schema) {
  return testing::schema_constraint(Json::parse(schema), fixture().vocabulary);
}

EngineOptions spec_options(ModelInstance* draft, int32_t k) {
  EngineOptions options;
  options.specdecode.draft = draft;
  options.specdecode.max_draft_tokens = k;
  options.specdecode.adaptive = false;  // always k: every step speculates
  return options;
}

struct Output {
  std::vector<std::vector<int32_t>> tokens;         // [choice]
  std::vector<std::optional<FinishReason>> finish;  // [choice]
  std::vector<std::vector<TokenLogprob>> logprobs;  // [choice]
  RequestStats stats;
};

Output run(Engine& engine, RequestOptions options) {
  const auto n = static_cast<size_t>(options.n);
  auto stream = engine.submit(std::move(options));
  SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
  Output out;
  out.tokens.resize(n);
  out.finish.resize(n);
  out.logprobs.resize(n);
  while (!(*stream)->done()) {
    auto event = (*stream)->next(5000ms);
    if (!event) continue;
    const auto c = static_cast<size_t>(event->choice);
    out.tokens[c].insert(out.tokens[c].end(), event->tokens.begin(), event->tokens.end());
    out.logprobs[c].insert(out.logprobs[c].end(), event->logprobs.begin(), event->logprobs.end());
    if (event->finish) out.finish[c] = event->finish;
  }
  out.stats = (*stream)->stats();
  return out;
}

RequestOptions constrained(const std::string& prompt, const char* schema, float temperature) {
  RequestOptions options;
  options.prompt = fixture().tokenizer->encode(prompt, true);
  options.params.max_tokens = 300;
  options.params.temperature = temperature;
  options.constraint = constraint_for(schema);
  return options;
}

// A choice that ended with "stop" holds a document that parses and
// validates; returns whether it ended so.
bool expect_valid(const std::vector<int32_t>& tokens, std::optional<FinishReason> finish,
                  const char* schema) {
  const std::string text = fixture().tokenizer->decode(tokens, true);
  if (finish != FinishReason::kFinishStop) {  // a random model may write digits forever
    EXPECT_EQ(finish, FinishReason::kFinishLength) << text;
    return false;
  }
  const Json doc = Json::parse(text, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON: " << text;
  std::string why;
  const Json s = Json::parse(schema);
  if (!doc.is_discarded()) {
    EXPECT_TRUE(testing::schema_valid(doc, s, s, &why)) << why << text;
  }
  return true;
}

const char* const kPrompts[] = {"Once upon a time, the JSON said", "Tom had a ball"};

TEST(GrammarSpecDecode, GreedyEqualsConstrainedGreedyWithoutADraft) {
  Fixture& f = fixture();
  Engine plain(*f.target, EngineOptions{});
  int n_documents = 0;
  for (const char* schema : kSchemas) {
    for (const char* prompt : kPrompts) {
      SCOPED_TRACE(::testing::Message() << prompt << " / " << schema);
      const Output expected = run(plain, constrained(prompt, schema, 0));
      n_documents += expect_valid(expected.tokens[0], expected.finish[0], schema) ? 1 : 0;
      for (ModelInstance* draft : {f.self_draft.get(), f.other_draft.get()}) {
        for (int32_t k : {1, 4}) {
          Engine engine(*f.target, spec_options(draft, k));
          const Output out = run(engine, constrained(prompt, schema, 0));
          EXPECT_EQ(out.tokens[0], expected.tokens[0]) << "k " << k;
          EXPECT_EQ(out.finish[0], expected.finish[0]) << "k " << k;
          EXPECT_TRUE(out.stats.speculative.enabled);
          EXPECT_GT(out.stats.speculative.draft_tokens, 0);
          if (draft == f.self_draft.get()) {
            // Same weights: only float near-ties between a one-row draft step
            // and a k+1-row verify step can reject.
            EXPECT_GE(out.stats.speculative.accepted_tokens,
                      out.stats.speculative.draft_tokens * 9 / 10)
                << "k " << k;
          }
          testing::expect_engine_drained(engine);
        }
      }
    }
  }
  EXPECT_GE(n_documents, 4) << "too few documents ended to check them";
}

// Repetition penalty and logprobs: the draft samples with a copy of the
// request's sampler, the target verifies row by row on the host, and the
// logprobs are the target's unmasked ones — all as without a draft.
TEST(GrammarSpecDecode, PenaltiesAndLogprobsAsWithoutADraft) {
  Fixture& f = fixture();
  Engine plain(*f.target, EngineOptions{});
  Engine engine(*f.target, spec_options(f.self_draft.get(), 3));
  for (size_t s = 0; s < 2; ++s) {
    RequestOptions options = constrained(kPrompts[s], kSchemas[s], 0);
    options.params.repetition_penalty = 1.3f;
    options.top_logprobs = 2;
    const Output expected = run(plain, options);
    const Output out = run(engine, options);
    EXPECT_EQ(out.tokens[0], expected.tokens[0]);
    EXPECT_EQ(out.finish[0], expected.finish[0]);
    ASSERT_EQ(out.logprobs[0].size(), expected.logprobs[0].size());
    for (size_t i = 0; i < out.logprobs[0].size(); ++i) {
      EXPECT_NEAR(out.logprobs[0][i].logprob, expected.logprobs[0][i].logprob, 1e-4f) << i;
    }
    EXPECT_GT(out.stats.speculative.accepted_tokens, 0);
  }
  testing::expect_engine_drained(engine);
}

// Sampled: every document validates (the draft's proposals and the
// residual draws are admitted), drafts are accepted, n > 1 choices each
// speculate, and a seed gives the same output twice.
TEST(GrammarSpecDecode, SampledDocumentsValidateAndAreSeeded) {
  Fixture& f = fixture();
  Engine engine(*f.target, spec_options(f.self_draft.get(), 4));
  int64_t accepted = 0;
  int n_documents = 0;
  for (int i = 0; i < 12; ++i) {
    const char* schema = kSchemas[size_t(i) % std::size(kSchemas)];
    RequestOptions options = constrained(kPrompts[i % 2], schema, i % 3 == 0 ? 1.5f : 0.8f);
    if (i % 4 == 1) options.params.top_p = 0.9f;
    if (i % 5 == 2) options.params.top_k = 20;
    options.params.seed = static_cast<uint64_t>(100 + i);
    options.n = i % 3 == 1 ? 2 : 1;
    const Output out = run(engine, options);
    for (size_t c = 0; c < out.tokens.size(); ++c) {
      n_documents += expect_valid(out.tokens[c], out.finish[c], schema) ? 1 : 0;
    }
    accepted += out.stats.speculative.accepted_tokens;
    if (i < 3) {
      const Output again = run(engine, options);
      EXPECT_EQ(again.tokens, out.tokens) << "seed " << 100 + i;
    }
  }
  EXPECT_GE(n_documents, 12);
  EXPECT_GT(accepted, 0);
  testing::expect_engine_drained(engine);
}

// The law, not just the validity: sampled constrained output with speculation
// is distributed as without a draft. A grammar whose three positions admit
// different characters makes every verification row's mask depend on the
// draft tokens before it; another model as the draft rejects often, so
// residual draws are common; temperature 1 keeps the random model's
// preferences. The three-character documents of both engines (different
// seeds: independent samples) go into one homogeneity test. A draft whose q
// ignored the mask, or a target row masked with the wrong position's state,
// moves probability between cells (or leaves the grammar) and fails it.
TEST(GrammarSpecDecode, SampledLawEqualsConstrainedSamplingWithoutADraft) {
  Fixture& f = fixture();
  auto g = grammar::parse_gbnf(testing::kThreePositionGrammar);
  ASSERT_TRUE(g.ok()) << g.message();
  auto constraint = std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(g).value()), f.vocabulary);
  constexpr int32_t kChoices = 16;
  constexpr int kRequests = 200;  // 3,200 documents a side
  std::map<std::string, size_t> cell_of;
  const auto sample = [&](Engine& engine, uint64_t seed) {
    std::vector<int64_t> counts(18, 0);
    int64_t accepted = 0;
    for (int r = 0; r < kRequests; ++r) {
      RequestOptions options;
      options.prompt = f.tokenizer->encode("Once upon a time", true);
      options.params.max_tokens = 8;
      options.params.temperature = 1.0f;
      options.params.seed = seed + static_cast<uint64_t>(r) * kChoices;
      options.n = kChoices;
      options.constraint = constraint;
      const Output out = run(engine, options);
      accepted += out.stats.speculative.accepted_tokens;
      for (int32_t c = 0; c < kChoices; ++c) {
        const std::string text = f.tokenizer->decode(out.tokens[size_t(c)], true);
        EXPECT_EQ(out.finish[size_t(c)], FinishReason::kFinishStop) << text;
        const size_t cell = testing::three_position_cell(text);  // 18: not a document
        if (cell < 18) ++counts[cell];
      }
    }
    return std::make_pair(counts, accepted);
  };
  Engine plain(*f.target, EngineOptions{});
  Engine speculative(*f.target, spec_options(f.other_draft.get(), 3));
  const auto [expected, no_drafts] = sample(plain, 1);
  const auto [observed, accepted] = sample(speculative, 1'000'000);
  EXPECT_EQ(no_drafts, 0);
  EXPECT_GT(accepted, 0);
  const ChiSquareFit fit = chi_square_homogeneity(expected, observed);
  std::printf("  accepted draft tokens %lld; chi2 %.2f df %d p %.4f\n",
              static_cast<long long>(accepted), fit.statistic, fit.df, fit.p_value);
  EXPECT_GE(fit.df, 10);
  EXPECT_GT(fit.p_value, 0.001);
  testing::expect_engine_drained(speculative);
}

}  // namespace
}  // namespace specstack

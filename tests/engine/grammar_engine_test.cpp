// Grammar-constrained decoding through the serving engine on the llama-gqa
// golden model (random weights: it knows nothing of JSON) with a 512-token
// byte-level tokenizer (tests/data/grammar/json-bytes-512): 200 generations over
// several schemas, greedy and sampled, n > 1, all end with "stop" and parse
// and validate — checked by tests/grammar/schema_check.h, which reads the
// schema and not the grammar. With speculative decoding: grammar_specdecode_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "golden_run.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/schema_check.h"
#include "grammar_test_schemas.h"
#include "json_bytes_grammar.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

const auto& kSchemas = testing::kGrammarTestSchemas;

struct Fixture {
  CpuBackend backend;
  std::unique_ptr<ModelInstance> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    fx->model = testing::load_golden_model("llama-gqa", fx->backend, options);
    testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
    fx->tokenizer = std::move(v.tokenizer);
    fx->vocabulary = std::move(v.vocabulary);
    return fx;
  }();
  return *f;
}

std::shared_ptr<grammar::TokenConstraint> constraint_for(const Json& schema) {
  return testing::schema_constraint(schema, fixture().vocabulary);
}

struct Output {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::optional<FinishReason>> finish;
};

Output collect(RequestStream& stream, int32_t n) {
  Output out;
  out.tokens.resize(size_t(n));
  out.finish.resize(size_t(n));
  while (!stream.done()) {
    auto event = stream.next(5000ms);
    if (!event) continue;
    auto& t = out.tokens[size_t(event->choice)];
    t.insert(t.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish) out.finish[size_t(event->choice)] = event->finish;
  }
  return out;
}

TEST(GrammarEngine, TwoHundredConstrainedGenerationsAllValidate) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  const std::vector<int32_t> prompt = f.tokenizer->encode("Once upon a time, the JSON said", true);
  struct Pending {
    size_t schema;
    int32_t n;
    std::shared_ptr<RequestStream> stream;
  };
  std::vector<Pending> pending;
  int total = 0;
  for (int i = 0; total < 200; ++i) {
    const size_t schema = size_t(i) % std::size(kSchemas);
    RequestOptions options;
    options.prompt = prompt;
    options.params.max_tokens = 400;
    options.params.seed = static_cast<uint64_t>(i);
    if (i % 4 == 0) {
      options.params.temperature = 0;  // greedy
    } else {
      options.params.temperature = i % 3 == 0 ? 1.5f : 0.8f;
      if (i % 5 == 0) options.params.top_p = 0.9f;
      if (i % 7 == 0) options.params.top_k = 20;
    }
    options.n = i % 6 == 1 ? 3 : 1;
    options.constraint = constraint_for(Json::parse(kSchemas[schema]));
    auto stream = engine.submit(std::move(options));
    ASSERT_TRUE(stream.ok()) << stream.message();
    pending.push_back({schema, i % 6 == 1 ? 3 : 1, *stream});
    total += pending.back().n;
  }
  int n_valid = 0;
  for (Pending& p : pending) {
    Output out = collect(*p.stream, p.n);
    const Json schema = Json::parse(kSchemas[p.schema]);
    for (int32_t c = 0; c < p.n; ++c) {
      const std::string text = f.tokenizer->decode(out.tokens[size_t(c)], true);
      EXPECT_EQ(out.finish[size_t(c)], FinishReason::kFinishStop) << text;
      const Json doc = Json::parse(text, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << text;
      std::string why;
      EXPECT_TRUE(testing::schema_valid(doc, schema, schema, &why)) << why << "\n" << text;
      ++n_valid;
    }
  }
  EXPECT_GE(n_valid, 200);
}

TEST(GrammarEngine, GreedyIsDeterministicAndChoicesDiverge) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  auto run = [&](float temperature, int32_t n) {
    RequestOptions options;
    options.prompt = f.tokenizer->encode("Tom had a ball", true);
    options.params.max_tokens = 300;
    options.params.temperature = temperature;
    options.params.seed = 3;
    options.n = n;
    options.constraint = constraint_for(Json::parse(kSchemas[0]));
    auto stream = engine.submit(std::move(options));
    SS_CHECK(stream.ok());
    return collect(**stream, n);
  };
  Output a = run(0, 1), b = run(0, 1);
  EXPECT_EQ(a.tokens, b.tokens);
  Output sampled = run(1.0f, 4);
  std::set<std::vector<int32_t>> distinct(sampled.tokens.begin(), sampled.tokens.end());
  EXPECT_GT(distinct.size(), 1u);
}

TEST(GrammarEngine, IgnoreEosEndsWhenTheDocumentIsComplete) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  auto g = grammar::parse_gbnf(R"(root ::= "{\"k\": " ("true" | "false") "}")");
  ASSERT_TRUE(g.ok());
  RequestOptions options;
  options.prompt = f.tokenizer->encode("Hi", true);
  options.params.max_tokens = 50;
  options.params.temperature = 0;
  options.params.ignore_eos = true;
  options.constraint = std::make_shared<grammar::TokenConstraint>(
      std::make_shared<const grammar::Grammar>(std::move(g).value()), f.vocabulary);
  auto stream = engine.submit(std::move(options));
  ASSERT_TRUE(stream.ok());
  Output out = collect(**stream, 1);
  const std::string text = f.tokenizer->decode(out.tokens[0], true);
  EXPECT_TRUE(text == R"({"k": true})" || text == R"({"k": false})") << text;
  EXPECT_EQ(out.finish[0], FinishReason::kFinishStop);
}

// Logprobs of a constrained request are the model's own (the unmasked
// distribution, as vLLM reports them): they say how much the grammar had to
// overrule the model. The first token of an object schema (one of the few
// that start with "{") is not reported as near-certain, and the alternatives
// include tokens the grammar rejected.
TEST(GrammarEngine, LogprobsAreTheUnmaskedModels) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  RequestOptions options;
  options.prompt = f.tokenizer->encode("Once upon a time", true);
  options.params.max_tokens = 40;
  options.params.temperature = 0;
  options.top_logprobs = 5;
  options.constraint = constraint_for(Json::parse(kSchemas[0]));
  auto stream = engine.submit(options);
  ASSERT_TRUE(stream.ok());
  std::vector<TokenLogprob> logprobs;
  std::vector<int32_t> tokens;
  while (!(*stream)->done()) {
    auto event = (*stream)->next(5000ms);
    if (!event) continue;
    tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
    logprobs.insert(logprobs.end(), event->logprobs.begin(), event->logprobs.end());
  }
  ASSERT_EQ(logprobs.size(), tokens.size());
  ASSERT_FALSE(logprobs.empty());
  EXPECT_EQ(f.tokenizer->decode({tokens[0]}, true).substr(0, 1), "{");
  // Masked, the few tokens starting with "{" would share (nearly) all the mass.
  EXPECT_LT(logprobs[0].logprob, -1.0f);
  int n_rejected_alternatives = 0;
  for (const auto& [token, logprob] : logprobs[0].top) {
    if (token == tokens[0]) continue;
    EXPECT_TRUE(std::isfinite(logprob));  // masked, they would be -inf
    ++n_rejected_alternatives;
  }
  EXPECT_GE(n_rejected_alternatives, 4);
  // Greedy on the masked logits still picked the best allowed token, which
  // the raw ranking need not put first.
  bool overruled = false;
  for (size_t i = 0; i < logprobs.size(); ++i) {
    overruled = overruled || (!logprobs[i].top.empty() && logprobs[i].top[0].first != tokens[i]);
  }
  EXPECT_TRUE(overruled);
}

// A lazily applied grammar (tool_choice "auto"): the trigger is two tokens
// of the model's own greedy output (so the marker is split over tokens and
// surely emitted), the grammar that trigger followed by a JSON document.
// The output up to the marker is exactly unconstrained greedy; from the
// marker on every token is admitted by the grammar and the document
// validates.
TEST(GrammarEngine, TriggeredGrammarLeavesTextFreeUntilTheMarker) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  const std::vector<int32_t> prompt = f.tokenizer->encode("Once upon a time", true);
  auto run = [&](std::shared_ptr<grammar::TokenConstraint> constraint,
                 std::optional<grammar::GrammarTrigger> trigger, int32_t max_tokens) {
    RequestOptions options;
    options.prompt = prompt;
    options.params.max_tokens = max_tokens;
    options.params.temperature = 0;
    options.constraint = std::move(constraint);
    options.constraint_trigger = std::move(trigger);
    auto stream = engine.submit(std::move(options));
    SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
    return collect(**stream, 1);
  };
  const std::vector<int32_t> free_tokens = run(nullptr, std::nullopt, 64).tokens[0];
  const grammar::TokenVocabulary& v = *f.vocabulary;
  auto printable = [&](int32_t id) {
    if (id < 0 || id >= v.size() || v.bytes(id).empty()) return false;
    for (char c : v.bytes(id)) {
      if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') return false;
    }
    return true;
  };
  // The first pair of printable tokens whose text first occurs where they end.
  std::string text, trigger;
  size_t last = 0;
  for (size_t i = 0; i < free_tokens.size() && trigger.empty(); ++i) {
    if (free_tokens[i] >= 0 && free_tokens[i] < v.size()) text += v.bytes(free_tokens[i]);
    if (i == 0 || !printable(free_tokens[i - 1]) || !printable(free_tokens[i])) continue;
    const std::string pair = v.bytes(free_tokens[i - 1]) + v.bytes(free_tokens[i]);
    if (text.find(pair) == text.size() - pair.size()) {
      trigger = pair;
      last = i;
    }
  }
  ASSERT_FALSE(trigger.empty()) << "no usable marker in the free output: " << text;

  const Json schema = Json::parse(kSchemas[0]);
  grammar::JsonSchemaOptions schema_options;
  schema_options.root_rule = "call";
  auto call = grammar::json_schema_to_gbnf(schema, schema_options);
  ASSERT_TRUE(call.ok()) << call.message();
  auto g = grammar::parse_gbnf("root ::= \"" + trigger + "\" call\n" + *call);
  ASSERT_TRUE(g.ok()) << g.message();
  auto grammar_ptr = std::make_shared<const grammar::Grammar>(std::move(g).value());
  auto constraint = std::make_shared<grammar::TokenConstraint>(grammar_ptr, f.vocabulary);
  Output lazy = run(constraint, grammar::GrammarTrigger{trigger, false, false}, 400);
  const std::vector<int32_t>& out = lazy.tokens[0];
  ASSERT_GT(out.size(), last + 1);
  EXPECT_TRUE(std::equal(free_tokens.begin(), free_tokens.begin() + long(last) + 1, out.begin()))
      << "the free text before the marker changed";
  EXPECT_EQ(lazy.finish[0], FinishReason::kFinishStop);

  // Replayed through the grammar from the marker on: every token admitted.
  grammar::GrammarMatcher m(grammar_ptr);
  ASSERT_TRUE(m.accept_bytes(trigger));
  std::string document;
  for (size_t i = last + 1; i < out.size(); ++i) {
    ASSERT_TRUE(out[size_t(i)] >= 0 && out[i] < v.size()) << "a special token in the call";
    EXPECT_TRUE(m.accept_bytes(v.bytes(out[i]))) << "token " << i << " not admitted";
    document += v.bytes(out[i]);
  }
  EXPECT_TRUE(m.can_end());
  const Json doc = Json::parse(document, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << "not JSON: " << document;
  std::string why;
  EXPECT_TRUE(testing::schema_valid(doc, schema, schema, &why)) << why << "\n" << document;
}

}  // namespace
}  // namespace specstack

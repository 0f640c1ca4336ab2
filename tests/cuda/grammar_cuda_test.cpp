// Grammar-constrained greedy decoding on the GPU (engine/grammar_stage.h):
// the masks go up with the plan and the sampling kernel applies them, so a
// constrained row is decided on the device like a plain greedy one. Run one
// request at a time (the same batch shapes, so the same logits), that path
// must give exactly the tokens of the host path (the same weights loaded
// with TokenPicking::kNever sample on the host from downloaded, host-masked
// logits); mixed
// with plain requests in one step, every document still validates. On the
// llama-gqa golden model with the 512-token byte-level JSON tokenizer.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <span>

#include "../engine/engine_test_util.h"
#include "../engine/golden_run.h"
#include "../engine/grammar_test_schemas.h"
#include "../engine/json_bytes_grammar.h"
#include "backend/cpu/cpu_backend.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/schema_check.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

// The first three of the CPU test's schemas (the fourth's pattern and uuid
// are the CPU test's alone).
const std::span<const char* const> kSchemas(testing::kGrammarTestSchemas,
                                            testing::kGpuGrammarTestSchemas);

struct Fixture {
  CpuBackend backend{CpuBackendOptions{1}};
  std::unique_ptr<ModelInstance> model;
  std::unique_ptr<ModelInstance> host_model;  // the same weights, sampled on the host
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

std::unique_ptr<Fixture> make_fixture() {
  auto f = std::make_unique<Fixture>();
  ModelInstanceOptions options;
  options.kv_tokens = 16 * 1024;
  options.device = Device::kCuda;
  options.cuda_graphs = true;
  options.graph_max_context = 1024;
  f->model = testing::load_golden_model("llama-gqa", f->backend, options);
  options.token_picking = TokenPicking::kNever;
  f->host_model = testing::load_golden_model("llama-gqa", f->backend, options);
  testing::JsonBytesVocabulary v = testing::load_json_bytes_vocabulary();
  f->tokenizer = std::move(v.tokenizer);
  f->vocabulary = std::move(v.vocabulary);
  return f;
}

std::shared_ptr<grammar::TokenConstraint> constraint_for(const Fixture& f, const char* schema) {
  return testing::schema_constraint(Json::parse(schema), f.vocabulary);
}

struct Output {
  std::vector<int32_t> tokens;
  std::optional<FinishReason> finish;
};

Output collect(RequestStream& stream) {
  Output out;
  while (!stream.done()) {
    auto event = stream.next(10000ms);
    if (!event) continue;
    out.tokens.insert(out.tokens.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish) out.finish = event->finish;
  }
  return out;
}

RequestOptions greedy_request(const Fixture& f, const std::string& prompt, int32_t max_tokens) {
  RequestOptions options;
  options.prompt = f.tokenizer->encode(prompt, true);
  options.params.temperature = 0;
  options.params.max_tokens = max_tokens;
  return options;
}

int64_t device_masked_rows(const Engine& engine) {
  int64_t n = 0;
  for (const StepRecord& r : engine.step_records()) n += r.n_device_masked;
  return n;
}

// A document that ended ("stop") parses and validates; returns whether it ended.
bool expect_valid(const Fixture& f, const Output& out, const char* schema) {
  const std::string text = f.tokenizer->decode(out.tokens, true);
  if (out.finish != FinishReason::kFinishStop) {  // a random model may write digits forever
    EXPECT_EQ(out.finish, FinishReason::kFinishLength) << text;
    return false;
  }
  const Json doc = Json::parse(text, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << "not JSON: " << text;
  std::string why;
  const Json s = Json::parse(schema);
  if (!doc.is_discarded()) {
    EXPECT_TRUE(testing::schema_valid(doc, s, s, &why)) << why << "\n" << text;
  }
  return true;
}

TEST(GrammarCuda, DeviceMasksGiveTheHostPathsTokens) {
  SS_REQUIRE_GPU();
  auto f = make_fixture();
  EngineOptions options;
  options.record_steps = true;
  const char* prompts[] = {"Once upon a time, the JSON said", "Tom had a ball", "{"};
  int n_complete = 0;
  for (size_t s = 0; s < std::size(kSchemas); ++s) {
    for (const char* prompt : prompts) {
      SCOPED_TRACE(::testing::Message() << "schema " << s << " prompt " << prompt);
      Output device, host;
      {
        Engine engine(*f->model, options);
        RequestOptions request = greedy_request(*f, prompt, 400);
        request.constraint = constraint_for(*f, kSchemas[s]);
        auto stream = engine.submit(std::move(request));
        ASSERT_TRUE(stream.ok()) << stream.message();
        device = collect(**stream);
        testing::expect_engine_drained(engine);  // the last step's record is in
        // Every decoded token's row was masked on the device.
        EXPECT_EQ(device_masked_rows(engine), static_cast<int64_t>(device.tokens.size()));
      }
      {
        Engine engine(*f->host_model, options);  // the logits come down, masked on the host
        RequestOptions request = greedy_request(*f, prompt, 400);
        request.constraint = constraint_for(*f, kSchemas[s]);
        auto stream = engine.submit(std::move(request));
        ASSERT_TRUE(stream.ok()) << stream.message();
        host = collect(**stream);
        testing::expect_engine_drained(engine);
        EXPECT_EQ(device_masked_rows(engine), 0);
      }
      EXPECT_EQ(device.tokens, host.tokens);
      EXPECT_EQ(device.finish, host.finish);
      n_complete += expect_valid(*f, device, kSchemas[s]) ? 1 : 0;
    }
  }
  EXPECT_GE(n_complete, 5) << "too few documents ended to check them";
}

// Constrained and plain greedy requests share device-greedy steps: the
// documents validate, the plain requests run to max_tokens unmasked.
TEST(GrammarCuda, ConstrainedAndPlainRowsShareADeviceStep) {
  SS_REQUIRE_GPU();
  auto f = make_fixture();
  EngineOptions options;
  options.record_steps = true;
  Engine engine(*f->model, options);
  struct Pending {
    int schema;  // -1: plain
    std::shared_ptr<RequestStream> stream;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 9; ++i) {
    const int schema = i % 3 == 2 ? -1 : (i / 3) % int(std::size(kSchemas));
    RequestOptions request =
        greedy_request(*f, "Request " + std::to_string(i) + ":", schema < 0 ? 120 : 400);
    request.params.ignore_eos = schema < 0;
    if (schema >= 0) request.constraint = constraint_for(*f, kSchemas[schema]);
    auto stream = engine.submit(std::move(request));
    ASSERT_TRUE(stream.ok()) << stream.message();
    pending.push_back({schema, *stream});
  }
  int n_complete = 0;
  for (Pending& p : pending) {
    const Output out = collect(*p.stream);
    if (p.schema < 0) {
      EXPECT_EQ(out.tokens.size(), 120u);
      EXPECT_EQ(out.finish, FinishReason::kFinishLength);
    } else {
      n_complete += expect_valid(*f, out, kSchemas[p.schema]) ? 1 : 0;
    }
  }
  EXPECT_GE(n_complete, 2) << "too few documents ended to check them";
  testing::expect_engine_drained(engine);
  bool mixed = false;  // a step that decided masked and unmasked rows on the device
  for (const StepRecord& r : engine.step_records()) {
    mixed = mixed || (r.n_device_masked > 0 && r.n_decode > r.n_device_masked);
  }
  EXPECT_TRUE(mixed);
}

// Speculative decoding of constrained greedy requests on the GPU: the draft
// picks its tokens on the device under each row's bitmask (its parser state
// after the tokens it proposed before), the target's verification rows go up
// with the bitmask of the state after the draft tokens before them, and the
// output is constrained greedy's without a draft — with the model itself as
// the draft (documents end inside accepted runs) and with another model
// (rejections), at k 1 and 4. A verify step's k + 1 rows run other GEMM
// shapes than a decode step's one, so as in specdecode_cuda_test the runs
// may fork where the plain run's two best admitted tokens are a bf16
// near-tie apart (both tokens' raw logprobs are in its top 20, and the
// difference of log-softmaxes is the difference of logits).
TEST(GrammarCuda, DeviceMaskedDraftsAndVerificationGiveThePlainTokens) {
  SS_REQUIRE_GPU();
  constexpr float kTieMargin = 0.05f;
  auto f = make_fixture();
  ModelInstanceOptions draft_options;
  draft_options.kv_tokens = 16 * 1024;
  draft_options.device = Device::kCuda;
  draft_options.cuda_graphs = true;
  draft_options.graph_max_context = 1024;
  auto self_draft = testing::load_golden_model("llama-gqa", f->backend, draft_options);
  auto other_draft = testing::load_golden_model("llama3-rope", f->backend, draft_options);
  const char* prompts[] = {"Once upon a time, the JSON said", "Tom had a ball"};
  EngineOptions plain_options;
  plain_options.record_steps = true;
  size_t identical = 0, total = 0;
  for (size_t s = 0; s < std::size(kSchemas); ++s) {
    for (const char* prompt : prompts) {
      SCOPED_TRACE(::testing::Message() << "schema " << s << " prompt " << prompt);
      Output expected;
      std::vector<TokenLogprob> logprobs;
      {
        Engine engine(*f->model, plain_options);
        RequestOptions request = greedy_request(*f, prompt, 300);
        request.constraint = constraint_for(*f, kSchemas[s]);
        request.top_logprobs = 20;  // for the near-tie check below (computed on the device)
        auto stream = engine.submit(std::move(request));
        ASSERT_TRUE(stream.ok()) << stream.message();
        while (!(*stream)->done()) {
          auto event = (*stream)->next(10000ms);
          if (!event) continue;
          expected.tokens.insert(expected.tokens.end(), event->tokens.begin(), event->tokens.end());
          logprobs.insert(logprobs.end(), event->logprobs.begin(), event->logprobs.end());
          if (event->finish) expected.finish = event->finish;
        }
        testing::expect_engine_drained(engine);
      }
      for (ModelInstance* draft : {self_draft.get(), other_draft.get()}) {
        for (int32_t k : {1, 4}) {
          SCOPED_TRACE(::testing::Message()
                       << (draft == self_draft.get() ? "self-draft" : "other draft") << " k " << k);
          EngineOptions options = plain_options;
          options.specdecode.draft = draft;
          options.specdecode.max_draft_tokens = k;
          options.specdecode.adaptive = false;
          Engine engine(*f->model, options);
          RequestOptions request = greedy_request(*f, prompt, 300);
          request.constraint = constraint_for(*f, kSchemas[s]);
          auto stream = engine.submit(std::move(request));
          ASSERT_TRUE(stream.ok()) << stream.message();
          const Output out = collect(**stream);
          EXPECT_GT((*stream)->stats().speculative.draft_tokens, 0);
          testing::expect_engine_drained(engine);
          // Verification rows were masked on the device, not on the host.
          EXPECT_GT(device_masked_rows(engine), static_cast<int64_t>(out.tokens.size()) / 2);
          if (out.finish == FinishReason::kFinishStop) expect_valid(*f, out, kSchemas[s]);
          size_t i = 0;
          while (i < expected.tokens.size() && i < out.tokens.size() &&
                 out.tokens[i] == expected.tokens[i]) {
            ++i;
          }
          identical += i;
          total += expected.tokens.size();
          if (i == expected.tokens.size() && i == out.tokens.size()) {
            EXPECT_EQ(out.finish, expected.finish);
            continue;
          }
          ASSERT_LT(i, expected.tokens.size()) << "went on past the plain run's end";
          ASSERT_LT(i, out.tokens.size()) << "ended before the plain run";
          float forked = -1e30f;  // the speculative token's raw logprob in the plain run
          for (const auto& [token, logprob] : logprobs[i].top) {
            if (token == out.tokens[i]) forked = logprob;
          }
          EXPECT_LT(logprobs[i].logprob - forked, kTieMargin) << "forked at token " << i;
        }
      }
    }
  }
  // H100: 680/908 (a random model's best admitted tokens are often close).
  std::printf("[grammar-cuda] speculative: %zu/%zu tokens identical before any fork\n", identical,
              total);
  EXPECT_GT(identical * 2, total);
}

}  // namespace
}  // namespace specstack

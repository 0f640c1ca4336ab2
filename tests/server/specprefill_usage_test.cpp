// usage.specprefill: present (with the engine's SpecPrefillStats) only when
// the server runs with a draft, in whole responses and in the streamed usage
// chunk, on both endpoints; and the speculative prefill counters on /metrics.
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "fake_engine_server.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_response.h"
#include "server_test_util.h"

namespace specstack {
namespace {

using testing::FakeEngine;
using testing::token_events;
using namespace std::chrono_literals;

TEST(SpecPrefillUsageJson, OmittedWithoutStatsAndShapedWithThem) {
  UsageCounts usage;
  usage.prompt_tokens = 100;
  usage.completion_tokens = 5;
  EXPECT_FALSE(usage_json(usage).contains("specprefill"));

  usage.specprefill = SpecPrefillStats{};
  usage.specprefill->applied = true;
  usage.specprefill->prompt_tokens = 100;
  usage.specprefill->kept_tokens = 20;
  usage.specprefill->scoring_ms = 12.5;
  const OrderedJson applied = usage_json(usage);
  EXPECT_EQ(applied["total_tokens"], 105);  // the rest of usage is unchanged
  EXPECT_EQ(applied["specprefill"].dump(),
            R"({"applied":true,"prompt_tokens":100,"kept_tokens":20,"scoring_ms":12.5,)"
            R"("fallback_reason":null})");

  usage.specprefill = SpecPrefillStats{};
  usage.specprefill->prompt_tokens = 100;
  usage.specprefill->kept_tokens = 100;
  usage.specprefill->fallback_reason = "draft_kv";
  const OrderedJson fallback = usage_json(usage)["specprefill"];
  EXPECT_EQ(fallback["applied"], false);
  EXPECT_EQ(fallback["fallback_reason"], "draft_kv");
  EXPECT_TRUE(fallback["scoring_ms"].is_number());
}

// The server in front of a FakeEngine that echoes each request's speculative
// prefill controls as its stats.
class SpecPrefillHttpTest : public testing::FakeEngineServerTest {
 protected:
  void SetUp() override {
    FakeEngineServerTest::SetUp();
    engine_.echo_specprefill_stats = true;
  }

  void start(bool with_draft, const Tokenizer* tokenizer = nullptr) {
    HttpServerOptions options;
    options.specprefill_usage = with_draft;
    start_server(options, tokenizer);
  }
};

TEST_F(SpecPrefillHttpTest, WithADraftUsageCarriesTheStats) {
  start(/*with_draft=*/true);
  const std::vector<int32_t> prompt = tokenizer_->encode(std::string(40, 'a') + " b c d", true);
  const std::string prompt_json = OrderedJson(prompt).dump();
  const OrderedJson body = post("/v1/completions", R"({"prompt": )" + prompt_json +
                                                       R"(, "extra_body": {"specprefill": true,
                                                          "specprefill_keep_pct": 0.5}})");
  const OrderedJson& specprefill = body["usage"]["specprefill"];
  ASSERT_TRUE(specprefill.is_object()) << body.dump();
  EXPECT_EQ(specprefill["applied"], true);
  EXPECT_EQ(specprefill["prompt_tokens"], static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(specprefill["kept_tokens"], static_cast<int64_t>((prompt.size() + 1) / 2));
  EXPECT_EQ(specprefill["scoring_ms"], 1.5);
  EXPECT_TRUE(specprefill["fallback_reason"].is_null());
  EXPECT_EQ(specprefill.size(), 5u);
  // What reached the engine.
  ASSERT_EQ(engine_.submitted().size(), 1u);
  EXPECT_EQ(engine_.submitted()[0].specprefill.keep_pct, std::optional<double>(0.5));

  // A request that does not ask still reports (here: not applied).
  const OrderedJson plain = post("/v1/completions", R"({"prompt": "Hello"})");
  EXPECT_EQ(plain["usage"]["specprefill"]["applied"], false);
  EXPECT_EQ(plain["usage"]["specprefill"]["kept_tokens"], 0);

  // Streamed: the usage chunk carries it; the other chunks have "usage": null.
  const OrderedJson usage = streamed_usage(
      "/v1/completions", R"({"prompt": )" + prompt_json +
                             R"(, "stream": true, "stream_options": {"include_usage": true},
                                "specprefill": true, "specprefill_keep_pct": 0.25})");
  EXPECT_EQ(usage["specprefill"]["applied"], true);
  EXPECT_EQ(usage["specprefill"]["kept_tokens"], static_cast<int64_t>((prompt.size() + 3) / 4));
  EXPECT_EQ(usage["completion_tokens"], static_cast<int64_t>(story_.size()));
}

TEST_F(SpecPrefillHttpTest, FallbackReasonIsAString) {
  engine_.echo_specprefill_stats = false;
  engine_.stats.specprefill.prompt_tokens = 9;
  engine_.stats.specprefill.kept_tokens = 9;
  engine_.stats.specprefill.scoring_ms = 0.25;
  engine_.stats.specprefill.fallback_reason = "scoring";
  start(/*with_draft=*/true);
  const OrderedJson body = post("/v1/completions", R"({"prompt": "Hello", "specprefill": true})");
  const OrderedJson& specprefill = body["usage"]["specprefill"];
  EXPECT_EQ(specprefill["applied"], false);
  EXPECT_EQ(specprefill["prompt_tokens"], 9);
  EXPECT_EQ(specprefill["scoring_ms"], 0.25);
  EXPECT_EQ(specprefill["fallback_reason"], "scoring");
}

TEST_F(SpecPrefillHttpTest, WithoutADraftUsageHasNoSpecPrefill) {
  start(/*with_draft=*/false);
  const std::string fields = R"("specprefill": true, "specprefill_keep_pct": 0.5)";
  const OrderedJson body = post("/v1/completions", R"({"prompt": "Hello", )" + fields + "}");
  EXPECT_TRUE(body["usage"].is_object());
  EXPECT_FALSE(body["usage"].contains("specprefill")) << body.dump();
  const OrderedJson usage = streamed_usage("/v1/completions", R"({"prompt": "Hello", "stream": true,
                                            "stream_options": {"include_usage": true}, )" +
                                                                  fields + "}");
  EXPECT_TRUE(usage.contains("completion_tokens"));
  EXPECT_FALSE(usage.contains("specprefill")) << usage.dump();
  // The controls are still accepted and passed on; the engine has no draft to use them.
  ASSERT_EQ(engine_.submitted().size(), 2u);
  EXPECT_EQ(engine_.submitted()[1].specprefill.enabled, std::optional<bool>(true));
}

TEST_F(SpecPrefillHttpTest, ChatResponsesCarryItToo) {
  auto llama = testing::load_llama3_tokenizer();
  if (!llama) GTEST_SKIP() << "npm llama3 tokenizer not installed";
  const std::vector<int32_t> story = llama->encode("Once upon a time", false);
  engine_.script = [story](const RequestOptions&) {
    return token_events(0, story, FinishReason::kFinishStop);
  };
  start(/*with_draft=*/true, llama.get());
  const std::string messages = R"("messages": [{"role": "user", "content": "Tell me a story"}])";
  const OrderedJson body =
      post("/v1/chat/completions", "{" + messages + R"(, "extra_body": {"specprefill": true}})");
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["usage"]["specprefill"]["applied"], true);
  EXPECT_EQ(body["usage"]["specprefill"]["prompt_tokens"], body["usage"]["prompt_tokens"]);
  const OrderedJson usage = streamed_usage(
      "/v1/chat/completions", "{" + messages +
                                  R"(, "stream": true, "stream_options": {"include_usage": true},
                                     "specprefill": true, "specprefill_keep_pct": 1})");
  EXPECT_EQ(usage["specprefill"]["applied"], true);
  EXPECT_EQ(usage["specprefill"]["kept_tokens"], usage["prompt_tokens"]);
}

TEST(SpecPrefillMetrics, CountersWithHelpAndType) {
  EngineMetrics metrics;
  metrics.specprefill_applied_total = 7;
  metrics.specprefill_fallback_total = 2;
  metrics.specprefill_tokens_saved_total = 123456;
  const std::string text = render_prometheus(metrics, {}, ThroughputRates{});
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"specstack_specprefill_applied_total", "7"},
           {"specstack_specprefill_fallback_total", "2"},
           {"specstack_specprefill_tokens_saved_total", "123456"}}) {
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    EXPECT_NE(text.find("\n" + name + " " + value + "\n"), std::string::npos) << name;
  }
  // Zeros are exposed too, so rate() works from the first scrape.
  const std::string idle = render_prometheus(EngineMetrics{}, {}, ThroughputRates{});
  EXPECT_NE(idle.find("\nspecstack_specprefill_applied_total 0\n"), std::string::npos);
}

}  // namespace
}  // namespace specstack

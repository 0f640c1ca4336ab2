// usage.speculative: present (draft_tokens, accepted_tokens, acceptance_rate
// from the engine's SpecDecodeStats) only when the server runs speculative
// decoding, in whole responses and in the streamed usage chunk; and the
// speculative decoding series on /metrics.
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

SpecDecodeStats decode_stats(int64_t drafted, int64_t accepted) {
  SpecDecodeStats stats;
  stats.enabled = true;
  stats.draft_tokens = drafted;
  stats.accepted_tokens = accepted;
  return stats;
}

TEST(SpecDecodeUsageJson, OmittedWithoutStatsAndShapedWithThem) {
  UsageCounts usage;
  usage.prompt_tokens = 10;
  usage.completion_tokens = 40;
  EXPECT_FALSE(usage_json(usage).contains("speculative"));

  usage.speculative = decode_stats(40, 30);
  const OrderedJson json = usage_json(usage);
  EXPECT_EQ(json["total_tokens"], 50);  // the rest of usage is unchanged
  EXPECT_EQ(json["speculative"].dump(),
            R"({"draft_tokens":40,"accepted_tokens":30,"acceptance_rate":0.75})");

  // Nothing drafted (e.g. the request turned it off): a rate of 0, not NaN.
  usage.speculative = SpecDecodeStats{};
  const OrderedJson idle = usage_json(usage)["speculative"];
  EXPECT_EQ(idle["draft_tokens"], 0);
  EXPECT_EQ(idle["accepted_tokens"], 0);
  ASSERT_TRUE(idle["acceptance_rate"].is_number_float());
  EXPECT_EQ(idle["acceptance_rate"].get<double>(), 0.0);
}

TEST(SpecDecodeUsageJson, BesideSpecPrefill) {
  UsageCounts usage;
  usage.specprefill = SpecPrefillStats{};
  usage.speculative = decode_stats(8, 2);
  const OrderedJson json = usage_json(usage);
  EXPECT_TRUE(json["specprefill"].is_object());
  EXPECT_EQ(json["speculative"]["acceptance_rate"], 0.25);
  // specprefill first, then speculative, after OpenAI's own fields; timing last.
  std::vector<std::string> keys;
  for (const auto& item : json.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"prompt_tokens", "completion_tokens", "total_tokens",
                                            "prompt_tokens_details", "specprefill", "speculative",
                                            "timing"}));
}

// The server in front of a FakeEngine whose every request reports the same
// SpecDecodeStats.
class SpecDecodeHttpTest : public testing::FakeEngineServerTest {
 protected:
  void SetUp() override {
    FakeEngineServerTest::SetUp();
    engine_.stats.speculative = decode_stats(12, 9);
  }

  void start(bool spec_decode) {
    HttpServerOptions options;
    options.specprefill_usage = spec_decode;  // serve sets both when it has a draft
    options.specdecode_usage = spec_decode;
    start_server(options);
  }

  OrderedJson usage(const std::string& body) const {
    return post("/v1/completions", body)["usage"];
  }
  OrderedJson streamed_usage(const std::string& body) const {
    return FakeEngineServerTest::streamed_usage("/v1/completions", body);
  }
};

TEST_F(SpecDecodeHttpTest, WithSpecDecodeUsageCarriesTheStats) {
  start(/*spec_decode=*/true);
  const OrderedJson whole = usage(R"({"prompt": "Hello", "max_tokens": 8})");
  ASSERT_TRUE(whole["speculative"].is_object()) << whole.dump();
  EXPECT_EQ(whole["speculative"]["draft_tokens"], 12);
  EXPECT_EQ(whole["speculative"]["accepted_tokens"], 9);
  EXPECT_EQ(whole["speculative"]["acceptance_rate"], 0.75);
  EXPECT_EQ(whole["speculative"].size(), 3u);

  const OrderedJson streamed = streamed_usage(
      R"({"prompt": "Hello", "stream": true, "stream_options": {"include_usage": true},
          "speculative_decoding": true})");
  EXPECT_EQ(streamed["completion_tokens"], static_cast<int64_t>(story_.size()));
  EXPECT_EQ(streamed["speculative"]["draft_tokens"], 12);
  EXPECT_EQ(streamed["speculative"]["acceptance_rate"], 0.75);

  // A request that opts out still reports (its engine stats; here the fake's).
  const OrderedJson opted_out = usage(R"({"prompt": "Hello", "speculative_decoding": false})");
  EXPECT_TRUE(opted_out["speculative"].is_object()) << opted_out.dump();

  // What reached the engine.
  const std::vector<RequestOptions> submitted = engine_.submitted();
  ASSERT_EQ(submitted.size(), 3u);
  EXPECT_FALSE(submitted[0].specdecode.enabled.has_value());
  EXPECT_EQ(submitted[1].specdecode.enabled, std::optional<bool>(true));
  EXPECT_EQ(submitted[2].specdecode.enabled, std::optional<bool>(false));
}

TEST_F(SpecDecodeHttpTest, WithoutSpecDecodeUsageKeepsOpenAisShape) {
  start(/*spec_decode=*/false);
  const OrderedJson whole = usage(R"({"prompt": "Hello", "speculative_decoding": true})");
  EXPECT_TRUE(whole.contains("completion_tokens")) << whole.dump();
  EXPECT_FALSE(whole.contains("speculative")) << whole.dump();
  const OrderedJson streamed = streamed_usage(
      R"({"prompt": "Hello", "stream": true, "stream_options": {"include_usage": true},
          "extra_body": {"speculative_decoding": true}})");
  EXPECT_TRUE(streamed.contains("completion_tokens"));
  EXPECT_FALSE(streamed.contains("speculative")) << streamed.dump();
  // The control is still accepted and passed on; the engine has no draft to use it.
  ASSERT_EQ(engine_.submitted().size(), 2u);
  EXPECT_EQ(engine_.submitted()[1].specdecode.enabled, std::optional<bool>(true));
}

TEST(SpecDecodeMetrics, CountersAndAcceptedLengthHistogram) {
  EngineMetrics metrics;
  metrics.specdecode_draft_tokens_total = 400;
  metrics.specdecode_accepted_tokens_total = 310;
  metrics.specdecode_verify_total = 100;
  metrics.specdecode_accepted_length.bounds = {0, 1, 2, 3, 4};
  metrics.specdecode_accepted_length.counts = {5, 9, 20, 35, 100, 100};
  metrics.specdecode_accepted_length.sum = 310;
  metrics.specdecode_accepted_length.count = 100;
  metrics.draft_kv_blocks_total = 64;
  metrics.draft_kv_blocks_free = 60;
  const std::string text = render_prometheus(metrics, {}, ThroughputRates{});
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"specstack_spec_decode_draft_tokens_total", "400"},
           {"specstack_spec_decode_accepted_tokens_total", "310"},
           {"specstack_spec_decode_verifications_total", "100"}}) {
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
    EXPECT_NE(text.find("# TYPE " + name + " counter\n"), std::string::npos) << name;
    EXPECT_NE(text.find("\n" + name + " " + value + "\n"), std::string::npos) << name;
  }
  // The draft's KV pool, as gauges beside the target's.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"specstack_draft_kv_blocks_total", "64"}, {"specstack_draft_kv_blocks_free", "60"}}) {
    EXPECT_NE(text.find("# TYPE " + name + " gauge\n"), std::string::npos) << name;
    EXPECT_NE(text.find("\n" + name + " " + value + "\n"), std::string::npos) << name;
  }
  const std::string h = "specstack_spec_decode_accepted_length";
  EXPECT_NE(text.find("# HELP " + h + " "), std::string::npos);
  EXPECT_NE(text.find("# TYPE " + h + " histogram\n"), std::string::npos);
  // Token-count bounds print as integers.
  for (const std::string& line :
       {h + "_bucket{le=\"0\"} 5", h + "_bucket{le=\"1\"} 9", h + "_bucket{le=\"2\"} 20",
        h + "_bucket{le=\"3\"} 35", h + "_bucket{le=\"4\"} 100", h + "_bucket{le=\"+Inf\"} 100",
        h + "_sum 310", h + "_count 100"}) {
    EXPECT_NE(text.find("\n" + line + "\n"), std::string::npos) << line << " in:\n" << text;
  }
  // The existing series keep their names.
  EXPECT_NE(text.find("\nspecstack_specprefill_applied_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE specstack_time_to_first_token_seconds histogram\n"),
            std::string::npos);

  // Zeros are exposed too (a server without a draft), so rate() works from the first scrape.
  const std::string idle = render_prometheus(EngineMetrics{}, {}, ThroughputRates{});
  EXPECT_NE(idle.find("\nspecstack_spec_decode_draft_tokens_total 0\n"), std::string::npos);
  EXPECT_NE(idle.find("\nspecstack_spec_decode_verifications_total 0\n"), std::string::npos);
  EXPECT_NE(idle.find("\n" + h + "_bucket{le=\"+Inf\"} 0\n"), std::string::npos);
  EXPECT_NE(idle.find("\n" + h + "_count 0\n"), std::string::npos);
}

}  // namespace
}  // namespace specstack

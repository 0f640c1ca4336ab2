// Per-request deadlines: the server's --request-timeout and a request's own
// `timeout` end a request that is still queued or still running; it is
// cancelled in the engine and the client gets 504 (non-streamed) or a
// "timeout" finish and an error event (streamed). Also usage.timing.
#include <gtest/gtest.h>

#include <thread>

#include "early_end_test_util.h"
#include "fake_engine_server.h"

namespace specstack {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class RequestTimeoutTest : public testing::FakeEngineServerTest {
 protected:
  testing::RawResponse post_completion(const std::string& fields) {
    return testing::post_any(port_, "/v1/completions", R"({"prompt": "x", )" + fields + "}");
  }
};

TEST_F(RequestTimeoutTest, AQueuedRequestTimesOutWith504AndIsCancelled) {
  engine_.script = nullptr;  // never produces a token: as if it waited in the queue
  start_server({});
  const auto start = Clock::now();
  const testing::RawResponse res = post_completion(R"("timeout": 0.05)");
  const auto elapsed = Clock::now() - start;
  EXPECT_EQ(res.status, 504) << res.body;
  const OrderedJson error = OrderedJson::parse(res.body)["error"];
  EXPECT_EQ(error["type"], "timeout");
  EXPECT_EQ(error["code"], "request_timeout");
  EXPECT_NE(error["message"].get<std::string>().find("0.05 s (0 tokens generated)"),
            std::string::npos)
      << error["message"];
  EXPECT_GE(elapsed, 50ms);
  EXPECT_LT(elapsed, 5s);
  ASSERT_NE(engine_.stream(0), nullptr);
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

TEST_F(RequestTimeoutTest, TheServerDefaultAppliesAndARequestMayRaiseIt) {
  engine_.script = nullptr;
  HttpServerOptions options;
  options.request_timeout_seconds = 0.05;
  start_server(options);
  EXPECT_EQ(post_completion(R"("max_tokens": 4)").status, 504);
  // Its own, longer timeout wins: this one finishes.
  engine_.script = [story = story_](const RequestOptions&) {
    return testing::token_events(0, story, FinishReason::kFinishLength);
  };
  const testing::RawResponse res = post_completion(R"("timeout": 30)");
  EXPECT_EQ(res.status, 200) << res.body;
  EXPECT_EQ(OrderedJson::parse(res.body)["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(engine_.stream(1)->cancelled());
}

TEST_F(RequestTimeoutTest, ARunningStreamIsCutWithTimeoutThenAnErrorEvent) {
  engine_.script = nullptr;
  engine_.endless = true;  // a token every few ms, never a finish
  start_server({});
  const testing::RawResponse res = post_completion(
      R"("stream": true, "timeout": 0.1, "stream_options": {"include_usage": true})");
  EXPECT_EQ(res.status, 200);
  // Tokens went out before the cut; the finish says why it ended.
  EXPECT_GT(testing::expect_cut_stream(res.body, "timeout", "timeout"), 0);
  ASSERT_NE(engine_.stream(0), nullptr);
  EXPECT_TRUE(engine_.stream(0)->cancelled());
  // The usage chunk comes before the error event, with the time spent.
  const std::vector<std::string> payloads = testing::sse_payloads(res.body);
  const OrderedJson usage = OrderedJson::parse(payloads[payloads.size() - 3])["usage"];
  ASSERT_TRUE(usage.is_object()) << payloads[payloads.size() - 3];
  EXPECT_GE(usage["timing"]["total_ms"].get<double>(), 100.0);
  EXPECT_GT(usage["completion_tokens"].get<int64_t>(), 0);
}

TEST_F(RequestTimeoutTest, AQueuedStreamEndsWithTimeoutToo) {
  engine_.script = nullptr;
  start_server({});
  const testing::RawResponse res = post_completion(R"("stream": true, "timeout": 0.05)");
  EXPECT_EQ(testing::expect_cut_stream(res.body, "timeout", "timeout"), 0);  // no text
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

TEST_F(RequestTimeoutTest, InvalidTimeoutsAre400) {
  start_server({});
  for (const char* value : {"0", "-1", "\"10\"", "true", "1e9"}) {
    const testing::RawResponse res = post_completion(std::string(R"("timeout": )") + value);
    EXPECT_EQ(res.status, 400) << value;
    EXPECT_NE(res.body.find("'timeout'"), std::string::npos) << res.body;
  }
  EXPECT_TRUE(engine_.submitted().empty());
  // extra_body works like the top level; null means "the server's".
  EXPECT_EQ(post_completion(R"("extra_body": {"timeout": 0}})").status, 400);
  EXPECT_EQ(post_completion(R"("timeout": null)").status, 200);
}

TEST_F(RequestTimeoutTest, UsageCarriesTheEnginesQueueAndFirstTokenTimes) {
  engine_.stats.queue_ms = 1.5;
  engine_.stats.ttft_ms = 12.25;
  start_server({});
  const testing::RawResponse res = post_completion(R"("timeout": 30)");
  ASSERT_EQ(res.status, 200) << res.body;
  const OrderedJson timing = OrderedJson::parse(res.body)["usage"]["timing"];
  EXPECT_EQ(timing["queue_ms"], 1.5);
  EXPECT_EQ(timing["ttft_ms"], 12.25);
  EXPECT_GE(timing["total_ms"].get<double>(), 0.0);
  // Streams carry it in the usage chunk.
  const OrderedJson usage = streamed_usage(
      "/v1/completions",
      R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": true}})");
  EXPECT_EQ(usage["timing"]["ttft_ms"], 12.25);
}

}  // namespace
}  // namespace specstack

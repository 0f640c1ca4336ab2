// Graceful drain: while draining, /health and new completion requests get 503
// (server_shutting_down, Retry-After), requests already admitted run to their
// end, and shutdown_in_flight() ends the rest with finish_reason "shutdown".
#include <gtest/gtest.h>

#include <thread>

#include "early_end_test_util.h"
#include "fake_engine_server.h"

namespace specstack {
namespace {

using testing::FakeStream;
using testing::token_events;
using namespace std::chrono_literals;

class HttpDrainTest : public testing::FakeEngineServerTest {
 protected:
  // Waits for the index-th request to reach the engine.
  std::shared_ptr<FakeStream> wait_stream(size_t index) {
    for (int i = 0; i < 2000 && !engine_.stream(index); ++i) std::this_thread::sleep_for(2ms);
    return engine_.stream(index);
  }
  void wait_in_flight(int64_t n) {
    for (int i = 0; i < 2000 && server_->in_flight() != n; ++i) std::this_thread::sleep_for(2ms);
    EXPECT_EQ(server_->in_flight(), n);
  }
};

TEST_F(HttpDrainTest, DrainingAnswers503ToNewRequestsAndHealth) {
  start_server({});
  EXPECT_EQ(testing::get_any(port_, "/health").status, 200);
  server_->begin_drain();
  EXPECT_TRUE(server_->draining());

  const testing::RawResponse health = testing::get_any(port_, "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(OrderedJson::parse(health.body)["status"], "draining");
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const testing::RawResponse res = testing::post_any(port_, path, R"({"prompt": "x"})");
    EXPECT_EQ(res.status, 503) << path;
    EXPECT_EQ(res.header("Retry-After"), "5");
    EXPECT_EQ(res.header("Connection"), "close");
    const OrderedJson error = OrderedJson::parse(res.body)["error"];
    EXPECT_EQ(error["type"], "server_shutting_down");
    EXPECT_EQ(error["code"], "server_shutting_down");
  }
  EXPECT_TRUE(engine_.submitted().empty());
  wait_in_flight(0);  // the rejected requests are not counted once answered
}

TEST_F(HttpDrainTest, RequestsAdmittedBeforeTheDrainRunToTheirEnd) {
  engine_.script = nullptr;  // the test feeds the events
  start_server({});
  std::string streamed;
  std::thread streaming([&] {
    streamed =
        testing::post_any(port_, "/v1/completions", R"({"prompt": "x", "stream": true})").body;
  });
  std::string whole;
  std::thread non_streaming(
      [&] { whole = testing::post_any(port_, "/v1/completions", R"({"prompt": "x"})").body; });
  auto first = wait_stream(0);
  auto second = wait_stream(1);
  ASSERT_TRUE(first && second);
  server_->begin_drain();
  EXPECT_EQ(server_->in_flight(), 2);
  EXPECT_EQ(testing::post_any(port_, "/v1/completions", R"({"prompt": "x"})").status, 503);

  std::this_thread::sleep_for(30ms);  // still running: nothing was cut
  EXPECT_FALSE(first->cancelled());
  EXPECT_FALSE(second->cancelled());
  for (auto& stream : {first, second}) {
    for (RequestEvent& event : token_events(0, story_, FinishReason::kFinishLength)) {
      stream->push(std::move(event));
    }
  }
  streaming.join();
  non_streaming.join();
  const std::vector<std::string> payloads = testing::sse_payloads(streamed);
  ASSERT_GE(payloads.size(), 2u) << streamed;
  EXPECT_EQ(payloads.back(), "[DONE]");
  EXPECT_EQ(OrderedJson::parse(payloads[payloads.size() - 2])["choices"][0]["finish_reason"],
            "length");
  const OrderedJson body = OrderedJson::parse(whole);
  EXPECT_EQ(body["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  wait_in_flight(0);
}

TEST_F(HttpDrainTest, ShutdownInFlightEndsStreamsWithShutdownAndAnErrorEvent) {
  engine_.script = nullptr;
  engine_.endless = true;  // they would never end on their own
  start_server({});
  constexpr int kStreams = 3;  // the fixture's server has 4 threads
  std::vector<std::string> bodies(kStreams);
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      bodies[static_cast<size_t>(i)] =
          testing::post_any(port_, "/v1/completions", R"({"prompt": "x", "stream": true})").body;
    });
  }
  for (size_t i = 0; i < kStreams; ++i) ASSERT_NE(wait_stream(i), nullptr);
  std::this_thread::sleep_for(20ms);  // some tokens go out first
  server_->begin_drain();
  EXPECT_EQ(server_->shutdown_in_flight(), kStreams);
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < kStreams; ++i) {
    EXPECT_GT(testing::expect_cut_stream(bodies[i], "shutdown", "server_shutting_down"), 0);
    EXPECT_TRUE(engine_.stream(i)->cancelled());  // the engine frees its blocks
  }
  wait_in_flight(0);
}

TEST_F(HttpDrainTest, ShutdownOfANonStreamedRequest) {
  engine_.script = nullptr;  // never ends on its own
  start_server({});
  // With a deadline the status line waits for the end: 503.
  testing::RawResponse with_deadline;
  std::thread first([&] {
    with_deadline =
        testing::post_any(port_, "/v1/completions", R"({"prompt": "x", "timeout": 60})");
  });
  ASSERT_NE(wait_stream(0), nullptr);
  server_->begin_drain();
  EXPECT_EQ(server_->shutdown_in_flight(), 1);
  first.join();
  EXPECT_EQ(with_deadline.status, 503) << with_deadline.body;
  EXPECT_EQ(with_deadline.header("Retry-After"), "5");
  EXPECT_EQ(OrderedJson::parse(with_deadline.body)["error"]["type"], "server_shutting_down");
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

TEST_F(HttpDrainTest, ShutdownOfANonStreamedRequestWhoseHeadersWentOut) {
  engine_.script = nullptr;
  start_server({});
  // Without a deadline the 200 went out at once (heartbeats watch the
  // client): the body says "shutdown".
  testing::RawResponse res;
  std::thread client(
      [&] { res = testing::post_any(port_, "/v1/completions", R"({"prompt": "x"})"); });
  auto stream = wait_stream(0);
  ASSERT_NE(stream, nullptr);
  stream->push(RequestEvent{0, {story_[0]}, {}, std::nullopt});
  stream->push(RequestEvent{0, {story_[1]}, {}, std::nullopt});
  std::this_thread::sleep_for(20ms);
  server_->begin_drain();
  EXPECT_EQ(server_->shutdown_in_flight(), 1);
  client.join();
  EXPECT_EQ(res.status, 200);
  const OrderedJson body = OrderedJson::parse(res.body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "shutdown");
  EXPECT_FALSE(body["choices"][0]["text"].get<std::string>().empty());  // what came before
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

TEST_F(HttpDrainTest, StopEndsANonStreamedRequestWaitingForItsDeadline) {
  engine_.script = nullptr;  // never ends on its own
  start_server({});
  testing::RawResponse res;
  std::thread client([&] {
    res = testing::post_any(port_, "/v1/completions", R"({"prompt": "x", "timeout": 600})");
  });
  ASSERT_NE(wait_stream(0), nullptr);
  const auto start = std::chrono::steady_clock::now();
  server_->stop();
  thread_.join();  // serve() returned: the request did not hold it for 600 s
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(res.status, 503) << res.body;
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

}  // namespace
}  // namespace specstack

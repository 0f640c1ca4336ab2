// InFlightRequests: counts tickets until they are dropped, and asks only the
// sessions attached to live tickets to shut down.
#include "server/in_flight.h"

#include <gtest/gtest.h>

#include "fake_engine.h"
#include "server_test_util.h"

namespace specstack {
namespace {

TEST(InFlightRequests, CountsTicketsUntilDropped) {
  InFlightRequests registry;
  EXPECT_EQ(registry.count(), 0);
  auto first = registry.enter();
  auto second = registry.enter();
  EXPECT_EQ(registry.count(), 2);
  first.reset();
  EXPECT_EQ(registry.count(), 1);
  EXPECT_EQ(registry.shutdown_all(), 0);  // nothing attached yet
  second.reset();
  EXPECT_EQ(registry.count(), 0);
}

TEST(InFlightRequests, ShutdownAllEndsAttachedSessionsAtTheirNextPoll) {
  auto tokenizer = testing::load_tinystories_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  testing::FakeEngine engine;  // the stream never ends on its own
  auto stream = engine.submit(RequestOptions{});
  ASSERT_TRUE(stream.ok());
  auto session = std::make_shared<CompletionSession>(*tokenizer, SessionOptions{}, *stream);
  InFlightRequests registry;
  auto ticket = registry.enter();
  ticket->attach(session);
  auto unattached = registry.enter();
  EXPECT_EQ(registry.shutdown_all(), 1);
  EXPECT_FALSE(engine.stream(0)->cancelled());  // only a flag so far: the poller acts on it
  session->poll(std::chrono::milliseconds(0));
  EXPECT_TRUE(session->finished());
  EXPECT_EQ(session->ended_early(), FinishReason::kFinishShutdown);
  EXPECT_EQ(session->end_error().status, 503);
  EXPECT_EQ(session->response()["choices"][0]["finish_reason"], "shutdown");
  EXPECT_TRUE(engine.stream(0)->cancelled());
  // A session whose response is over (ticket dropped) is not asked again.
  ticket.reset();
  EXPECT_EQ(registry.shutdown_all(), 0);
}

}  // namespace
}  // namespace specstack

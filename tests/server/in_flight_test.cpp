// InFlightRequests: counts tickets until they are dropped, and asks every
// live ticket's session to shut down: attached ones at once, one submitted
// but not yet attached when it attaches.
#include "server/in_flight.h"

#include <gtest/gtest.h>

#include "base/check.h"
#include "fake_engine.h"
#include "server_test_util.h"

namespace specstack {
namespace {

// Completion sessions on a FakeEngine whose streams never end on their own.
struct EndlessSessions {
  std::unique_ptr<Tokenizer> tokenizer = testing::load_tinystories_tokenizer();
  testing::FakeEngine engine;
  // The next session (stream i of the engine for the i-th call).
  std::shared_ptr<CompletionSession> next() {
    auto stream = engine.submit(RequestOptions{});
    SS_CHECK(stream.ok());
    return std::make_shared<CompletionSession>(*tokenizer, SessionOptions{}, *stream);
  }
};

TEST(InFlightRequests, CountsTicketsUntilDropped) {
  InFlightRequests registry;
  EXPECT_EQ(registry.count(), 0);
  auto first = registry.enter();
  auto second = registry.enter();
  EXPECT_EQ(registry.count(), 2);
  first.reset();
  EXPECT_EQ(registry.count(), 1);
  EXPECT_EQ(registry.shutdown_all(), 1);  // the one in flight (not attached yet)
  second.reset();
  EXPECT_EQ(registry.count(), 0);
}

TEST(InFlightRequests, ShutdownAllEndsAttachedSessionsAtTheirNextPoll) {
  EndlessSessions sessions;
  ASSERT_NE(sessions.tokenizer, nullptr);
  testing::FakeEngine& engine = sessions.engine;
  auto session = sessions.next();
  InFlightRequests registry;
  auto ticket = registry.enter();
  ticket->attach(session);
  auto unattached = registry.enter();
  EXPECT_EQ(registry.shutdown_all(), 2);
  EXPECT_FALSE(engine.stream(0)->cancelled());  // only a flag so far: the poller acts on it
  session->poll(std::chrono::milliseconds(0));
  EXPECT_TRUE(session->finished());
  EXPECT_EQ(session->ended_early(), FinishReason::kFinishShutdown);
  EXPECT_EQ(session->end_error().status, 503);
  EXPECT_EQ(session->response()["choices"][0]["finish_reason"], "shutdown");
  EXPECT_TRUE(engine.stream(0)->cancelled());
  // A session whose response is over (ticket dropped) is not asked again;
  // the unattached request still in flight is.
  ticket.reset();
  EXPECT_EQ(registry.shutdown_all(), 1);
  unattached.reset();
  EXPECT_EQ(registry.shutdown_all(), 0);
}

// A request submitted just before the drain asked everyone, but attached
// just after, still ends at its first poll (the race the drain test met).
TEST(InFlightRequests, AskedBeforeItsSessionAttachesItEndsWhenItDoes) {
  EndlessSessions sessions;
  ASSERT_NE(sessions.tokenizer, nullptr);
  testing::FakeEngine& engine = sessions.engine;
  auto session = sessions.next();
  InFlightRequests registry;
  auto ticket = registry.enter();
  EXPECT_EQ(registry.shutdown_all(), 1);
  ticket->attach(session);
  session->poll(std::chrono::milliseconds(0));
  EXPECT_TRUE(session->finished());
  EXPECT_EQ(session->ended_early(), FinishReason::kFinishShutdown);
  EXPECT_TRUE(engine.stream(0)->cancelled());
  // A ticket that enters after the call is not asked.
  auto later = registry.enter();
  auto other = sessions.next();
  later->attach(other);
  other->poll(std::chrono::milliseconds(0));
  EXPECT_FALSE(other->finished());
  EXPECT_FALSE(engine.stream(1)->cancelled());
}

}  // namespace
}  // namespace specstack

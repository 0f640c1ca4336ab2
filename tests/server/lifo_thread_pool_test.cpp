#include "server/lifo_thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

namespace specstack {
namespace {

using namespace std::chrono_literals;

// Waits until `pred` holds (the pool works on its own threads), at most 10 s.
template <typename Pred>
bool eventually(Pred pred) {
  for (int i = 0; i < 1000 && !pred(); ++i) std::this_thread::sleep_for(10ms);
  return pred();
}

TEST(LifoThreadPoolTest, SequentialJobsReuseOneThread) {
  LifoThreadPool pool(64);
  std::set<std::thread::id> ids;
  for (int i = 0; i < 50; ++i) {
    std::promise<std::thread::id> ran;
    pool.enqueue([&] { ran.set_value(std::this_thread::get_id()); });
    ids.insert(ran.get_future().get());
    // Next job only once the thread has parked again, as between two requests.
    ASSERT_TRUE(eventually([&] { return pool.n_idle() == pool.n_started(); }));
  }
  // httplib's pool would have cycled through its threads; this one starts one.
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(pool.n_started(), 1u);
}

TEST(LifoThreadPoolTest, StartsThreadsOnlyUpToTheLimitAndQueuesTheRest) {
  LifoThreadPool pool(4);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> running{0}, done{0};
  for (int i = 0; i < 10; ++i) {
    pool.enqueue([&] {
      ++running;
      released.wait();
      ++done;
    });
  }
  ASSERT_TRUE(eventually([&] { return running.load() == 4; }));
  EXPECT_EQ(pool.n_started(), 4u);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(running.load(), 4);  // the other six wait for a thread
  release.set_value();
  ASSERT_TRUE(eventually([&] { return done.load() == 10; }));
  EXPECT_EQ(pool.n_started(), 4u);
}

TEST(LifoThreadPoolTest, TheMostRecentlyIdleThreadTakesTheNextJob) {
  LifoThreadPool pool(8);
  // Two jobs at once start two threads; the one that finishes last is the
  // most recently idle and must take the next job.
  std::promise<void> first_done_gate, second_gate;
  std::shared_future<void> first_gate = first_done_gate.get_future().share();
  std::shared_future<void> last_gate = second_gate.get_future().share();
  std::promise<std::thread::id> first_id, last_id;
  std::atomic<int> started{0};
  pool.enqueue([&] {
    ++started;
    first_gate.wait();
    first_id.set_value(std::this_thread::get_id());
  });
  pool.enqueue([&] {
    ++started;
    last_gate.wait();
    last_id.set_value(std::this_thread::get_id());
  });
  ASSERT_TRUE(eventually([&] { return started.load() == 2; }));
  first_done_gate.set_value();
  const std::thread::id first = first_id.get_future().get();
  ASSERT_TRUE(eventually([&] { return pool.n_idle() == 1; }));  // the first parks
  second_gate.set_value();
  const std::thread::id last = last_id.get_future().get();
  ASSERT_TRUE(eventually([&] { return pool.n_idle() == 2; }));  // the second parks after it
  std::promise<std::thread::id> next;
  pool.enqueue([&] { next.set_value(std::this_thread::get_id()); });
  const std::thread::id taken = next.get_future().get();
  EXPECT_EQ(taken, last);
  EXPECT_NE(taken, first);
}

TEST(LifoThreadPoolTest, ShutdownRunsQueuedJobsAndJoins) {
  std::atomic<int> done{0};
  {
    LifoThreadPool pool(2);
    for (int i = 0; i < 20; ++i) {
      pool.enqueue([&] {
        std::this_thread::sleep_for(1ms);
        ++done;
      });
    }
    pool.shutdown();
    EXPECT_EQ(done.load(), 20);
    pool.shutdown();  // idempotent; the destructor calls it again
  }
  EXPECT_EQ(done.load(), 20);
}

}  // namespace
}  // namespace specstack

// SIGTERM / SIGINT reach the watcher's callback (and not the default action,
// which would end this test program), and the old handlers come back after.
#include "server/shutdown_signals.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace specstack {
namespace {

using namespace std::chrono_literals;

void ignore_signal(int) {}

TEST(ShutdownSignals, SignalsBecomeCallbacksAndTicksRun) {
  std::atomic<int> last_signal{0};
  std::atomic<int> n_signals{0};
  std::atomic<int> n_ticks{0};
  {
    ShutdownSignals signals;
    signals.watch(
        [&](int signo) {
          last_signal = signo;
          ++n_signals;
        },
        [&] { ++n_ticks; }, 5ms);
    // From another thread, as a signal may land on any thread.
    std::thread([] { ::kill(::getpid(), SIGTERM); }).join();
    for (int i = 0; i < 400 && n_signals < 1; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(last_signal, SIGTERM);
    ::raise(SIGINT);
    for (int i = 0; i < 400 && n_signals < 2; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_EQ(last_signal, SIGINT);
    EXPECT_EQ(n_signals, 2);
    for (int i = 0; i < 400 && n_ticks < 3; ++i) std::this_thread::sleep_for(5ms);
    EXPECT_GE(n_ticks, 3);
    signals.stop();
    const int ticks_at_stop = n_ticks;
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(n_ticks, ticks_at_stop);  // the watcher is gone
  }
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);  // restored

  // A handler installed before is restored too.
  struct sigaction mine {};
  mine.sa_handler = ignore_signal;
  struct sigaction before {};
  ASSERT_EQ(::sigaction(SIGINT, &mine, &before), 0);
  { ShutdownSignals signals; }
  ASSERT_EQ(::sigaction(SIGINT, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, ignore_signal);
  ASSERT_EQ(::sigaction(SIGINT, &before, nullptr), 0);
}

}  // namespace
}  // namespace specstack

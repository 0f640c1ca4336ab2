// SIGINT / SIGTERM as an ordinary event on a watcher thread (self-pipe): the
// handler only writes the signal number into a pipe, and the watcher thread
// reads it and runs the callback, where anything may be done. Blocking the
// signals and sigwait-ing for them instead would not work: threads started
// before main (OpenBLAS's pool) keep them unblocked and would take the default
// action.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

namespace specstack {

class ShutdownSignals {
 public:
  // Installs the handlers. One instance at a time per process: a signal
  // disposition is process-wide state.
  ShutdownSignals();
  ~ShutdownSignals();  // stops the watcher and restores the previous handlers
  ShutdownSignals(const ShutdownSignals&) = delete;
  ShutdownSignals& operator=(const ShutdownSignals&) = delete;

  // Starts the watcher: on_signal(signo) for each signal, and on_tick() about
  // every `tick` (periodic work such as retrying a stop or logging stats).
  void watch(std::function<void(int)> on_signal, std::function<void()> on_tick,
             std::chrono::milliseconds tick = std::chrono::milliseconds(100));
  // Ends the watcher thread (waits up to one tick). Call it before what the
  // callbacks use goes away.
  void stop();

 private:
  int pipe_read_ = -1;
  int pipe_write_ = -1;
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
  std::atomic<bool> stopping_{false};
  std::thread watcher_;
};

}  // namespace specstack

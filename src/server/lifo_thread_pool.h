// The HTTP server's worker pool (an httplib::TaskQueue). Each task is one
// request of a connection (staged_server.h), which holds a worker until its
// response ends, so the pool must be as large as the requests in flight
// (--http-threads: about 1300 by default). httplib's own pool starts every
// thread up front and hands each new task to whichever waiting thread its
// condition variable wakes, which cycles through all of them: every thread's
// stack high-water mark, its malloc tcache and its thread-local data then
// become resident, and RSS creeps up for tens of thousands of requests
// (docs/DESIGN-NOTES.md, "Memory over time").
//
// This pool starts a thread only when no started one is idle, and gives work
// to the most recently idle thread (LIFO). The threads that ever run are then
// as many as the peak concurrency, and the hot ones stay hot. Threads are
// started by a spawner thread, never by enqueue(): enqueue() runs on the idle
// stage's epoll thread, which must not wait on a clone().
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace specstack {

class LifoThreadPool final : public httplib::TaskQueue {
 public:
  explicit LifoThreadPool(size_t max_threads);
  ~LifoThreadPool() override;
  LifoThreadPool(const LifoThreadPool&) = delete;
  LifoThreadPool& operator=(const LifoThreadPool&) = delete;

  // Runs `fn` on the most recently idle thread, else on a thread the spawner
  // starts for it (up to max_threads), else on the first to come free.
  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread. Idempotent.
  void shutdown() override;

  size_t n_started() const;  // threads started so far
  size_t n_idle() const;     // of those, waiting for work

 private:
  struct Worker {
    std::condition_variable wake;
    std::function<void()> job;  // handed over by enqueue() while idle
    std::thread thread;
  };
  void run(Worker* self);
  void spawn_loop();
  bool needs_thread() const;  // under mutex_

  const size_t max_threads_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;                  // back: the most recently idle
  std::deque<std::function<void()>> pending_;  // waiting for a thread
  size_t n_starting_ = 0;                      // started, not yet at their first job
  bool stopping_ = false;
  std::condition_variable spawn_wake_;
  std::thread spawner_;
};

}  // namespace specstack

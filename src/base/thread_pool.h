// A fork-join pool for the CPU kernels. parallel_for splits [0, n) into
// contiguous ranges, runs them on the workers and the calling thread, and
// returns when all are done. Workers spin briefly before sleeping so that the
// many small kernels of a decode step do not pay a futex wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specstack {

class ThreadPool {
 public:
  // n_threads counts the caller; 0 means hardware concurrency.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) is called on disjoint ranges covering [0, n). Ranges are at
  // least min_grain long, so tiny loops stay on the calling thread.
  void parallel_for(int64_t n, int64_t min_grain,
                    const std::function<void(int64_t begin, int64_t end)>& fn);

 private:
  void worker_loop(int worker_index);
  void run_share(int share_index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stopping_ = false;

  // The current job, valid while pending_ > 0.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_shares_ = 0;
};

}  // namespace specstack

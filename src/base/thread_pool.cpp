#include "base/thread_pool.h"

#include <algorithm>

namespace specstack {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_share(int share_index) {
  if (share_index >= job_shares_) return;
  int64_t chunk = (job_n_ + job_shares_ - 1) / job_shares_;
  int64_t begin = share_index * chunk;
  int64_t end = std::min(job_n_, begin + chunk);
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::worker_loop(int worker_index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little: kernels arrive back to back during a forward pass.
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < 4000) {
      ++spins;
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
    }
    run_share(worker_index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t max_shares = std::max<int64_t>(1, n / std::max<int64_t>(1, min_grain));
  int shares = static_cast<int>(std::min<int64_t>(n_threads(), max_shares));
  if (shares <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_shares_ = shares;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_release);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_share(0);
  while (pending_.load(std::memory_order_acquire) > 0) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace specstack

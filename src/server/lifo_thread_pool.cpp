#include "server/lifo_thread_pool.h"

#include <algorithm>

namespace specstack {

LifoThreadPool::LifoThreadPool(size_t max_threads)
    : max_threads_(std::max<size_t>(1, max_threads)) {}

LifoThreadPool::~LifoThreadPool() {
  shutdown();
}

void LifoThreadPool::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!idle_.empty()) {
    Worker* worker = idle_.back();
    idle_.pop_back();
    worker->job = std::move(fn);
    worker->wake.notify_one();
    return;
  }
  if (workers_.size() < max_threads_ && !stopping_) {
    auto worker = std::make_unique<Worker>();
    Worker* raw = worker.get();
    workers_.push_back(std::move(worker));
    raw->thread = std::thread(&LifoThreadPool::run, this, raw, std::move(fn));
    return;
  }
  pending_.push_back(std::move(fn));
}

void LifoThreadPool::run(Worker* self, std::function<void()> job) {
  while (true) {
    job();
    job = nullptr;  // destroy what the job captured outside the lock
    std::unique_lock<std::mutex> lock(mutex_);
    if (!pending_.empty()) {
      job = std::move(pending_.front());
      pending_.pop_front();
      continue;
    }
    if (stopping_) return;
    idle_.push_back(self);
    self->wake.wait(lock, [&] { return self->job != nullptr || stopping_; });
    if (self->job == nullptr) return;  // stopping, nothing handed over
    job = std::move(self->job);
    self->job = nullptr;
  }
}

void LifoThreadPool::shutdown() {
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    for (Worker* worker : idle_) worker->wake.notify_one();
    idle_.clear();
    workers.swap(workers_);
  }
  // Busy threads finish their job, then drain pending_ before they see stopping_.
  for (auto& worker : workers) worker->thread.join();
}

size_t LifoThreadPool::n_idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

size_t LifoThreadPool::n_started() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return workers_.size();
}

}  // namespace specstack

#include "server/lifo_thread_pool.h"

#include <algorithm>

namespace specstack {

LifoThreadPool::LifoThreadPool(size_t max_threads)
    : max_threads_(std::max<size_t>(1, max_threads)) {
  spawner_ = std::thread(&LifoThreadPool::spawn_loop, this);
}

LifoThreadPool::~LifoThreadPool() {
  shutdown();
}

void LifoThreadPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!idle_.empty()) {
    Worker* worker = idle_.back();
    idle_.pop_back();
    worker->job = std::move(fn);
    worker->wake.notify_one();
    return;
  }
  pending_.push_back(std::move(fn));
  if (needs_thread()) spawn_wake_.notify_one();
}

bool LifoThreadPool::needs_thread() const {
  return pending_.size() > n_starting_ && workers_.size() < max_threads_;
}

void LifoThreadPool::spawn_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    spawn_wake_.wait(lock, [&] { return stopping_ || needs_thread(); });
    if (stopping_) return;
    auto worker = std::make_unique<Worker>();
    Worker* raw = worker.get();
    workers_.push_back(std::move(worker));
    ++n_starting_;
    // Started outside the lock so enqueue() never waits on a clone(); only
    // this thread and shutdown() (after joining this one) touch raw->thread.
    lock.unlock();
    std::thread thread(&LifoThreadPool::run, this, raw);
    lock.lock();
    raw->thread = std::move(thread);
  }
}

void LifoThreadPool::run(Worker* self) {
  std::unique_lock<std::mutex> lock(mutex_);
  --n_starting_;
  while (true) {
    std::function<void()> job;
    if (!pending_.empty()) {
      job = std::move(pending_.front());
      pending_.pop_front();
    } else if (stopping_) {
      return;
    } else {
      idle_.push_back(self);
      self->wake.wait(lock, [&] { return self->job != nullptr || stopping_; });
      if (self->job == nullptr) return;  // stopping, nothing handed over
      job = std::move(self->job);
      self->job = nullptr;
    }
    lock.unlock();
    job();
    job = nullptr;  // destroy what the job captured outside the lock
    lock.lock();
  }
}

void LifoThreadPool::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !spawner_.joinable() && workers_.empty()) return;
    stopping_ = true;
    for (Worker* worker : idle_) worker->wake.notify_one();
    idle_.clear();
    spawn_wake_.notify_one();
  }
  if (spawner_.joinable()) spawner_.join();
  std::vector<std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    workers.swap(workers_);
  }
  // Busy threads finish their job, then drain pending_ before they see stopping_.
  for (auto& worker : workers) worker->thread.join();
  // Jobs queued before the spawner gave them a thread run here: httplib's
  // connection tasks close their sockets, and none may be lost.
  std::deque<std::function<void()>> left;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left.swap(pending_);
  }
  for (auto& job : left) job();
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

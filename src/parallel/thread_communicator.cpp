#include "parallel/thread_communicator.h"

#include <algorithm>

#include "base/check.h"

namespace specstack {

ThreadCommunicatorGroup::ThreadCommunicatorGroup(int size)
    : size_(size),
      barrier_(size),
      buffers_(static_cast<size_t>(size)),
      sends_(static_cast<size_t>(size)),
      counts_(static_cast<size_t>(size)) {
  SS_CHECK_GT(size, 0);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<ThreadCommunicator>(*this, r));
}

int ThreadCommunicator::size() const {
  return group_.size_;
}

void ThreadCommunicator::barrier() {
  group_.barrier_.arrive_and_wait();
}

void ThreadCommunicator::all_reduce_sum(float* data, int64_t count) {
  const int n = group_.size_;
  if (n == 1) return;
  group_.buffers_[static_cast<size_t>(rank_)] = data;
  group_.counts_[static_cast<size_t>(rank_)] = count;
  barrier();  // every buffer is published
  for (int r = 0; r < n; ++r) SS_CHECK_EQ(group_.counts_[static_cast<size_t>(r)], count);
  // This rank owns elements [begin, end): it reads them from every buffer and
  // writes the sum back to every buffer. The shares are disjoint, so no
  // element is read by one rank while another writes it.
  const int64_t begin = count * rank_ / n;
  const int64_t end = count * (rank_ + 1) / n;
  float* const* buffers = group_.buffers_.data();
  for (int64_t i = begin; i < end; ++i) {
    float sum = buffers[0][i];
    for (int r = 1; r < n; ++r) sum += buffers[r][i];  // rank order: deterministic
    for (int r = 0; r < n; ++r) buffers[r][i] = sum;
  }
  barrier();  // every share is written; the buffers may be reused
}

void ThreadCommunicator::all_gather(const float* send, int64_t count, float* recv) {
  const int n = group_.size_;
  group_.sends_[static_cast<size_t>(rank_)] = send;
  group_.counts_[static_cast<size_t>(rank_)] = count;
  barrier();
  for (int r = 0; r < n; ++r) {
    SS_CHECK_EQ(group_.counts_[static_cast<size_t>(r)], count);
    std::copy_n(group_.sends_[static_cast<size_t>(r)], count, recv + r * count);
  }
  barrier();  // no rank reuses its send buffer while another still copies it
}

}  // namespace specstack

// ThreadCommunicator: a Communicator for N ranks that are threads of one
// process (the CPU tensor-parallel model, and the reference the NCCL
// communicator is tested against). The ranks share a ThreadCommunicatorGroup:
// each publishes its buffer, then reduces its own share of the elements over
// every rank's buffer IN RANK ORDER and writes the sum back to all of them, so
// the result is bitwise the same whatever order the threads arrive in.
#pragma once

#include <barrier>
#include <cstdint>
#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace specstack {

class ThreadCommunicatorGroup;

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadCommunicatorGroup& group, int rank) : group_(group), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce_sum(float* data, int64_t count) override;
  void all_gather(const float* send, int64_t count, float* recv) override;
  void barrier() override;

 private:
  ThreadCommunicatorGroup& group_;
  int rank_;
};

class ThreadCommunicatorGroup {
 public:
  explicit ThreadCommunicatorGroup(int size);
  ThreadCommunicatorGroup(const ThreadCommunicatorGroup&) = delete;
  ThreadCommunicatorGroup& operator=(const ThreadCommunicatorGroup&) = delete;

  int size() const { return size_; }
  // The communicator rank `rank` (0 <= rank < size) calls from its own thread.
  Communicator& rank(int rank) { return *ranks_[static_cast<size_t>(rank)]; }

 private:
  friend class ThreadCommunicator;
  int size_;
  std::barrier<> barrier_;
  // What each rank published for the collective in progress.
  std::vector<float*> buffers_;      // [size] all_reduce: in/out buffers
  std::vector<const float*> sends_;  // [size] all_gather: send buffers
  std::vector<int64_t> counts_;      // [size] element counts (must agree)
  std::vector<std::unique_ptr<ThreadCommunicator>> ranks_;
};

}  // namespace specstack

// NcclCommunicator: the Communicator of a CUDA tensor-parallel rank, over
// NCCL (the library vLLM, SGLang and TensorRT-LLM use; nothing hand-written).
// Buffers are device pointers on the rank's GPU; every call is enqueued on the
// rank's stream and ordered by it (the call returns once enqueued, not when
// the data has moved; barrier() alone waits). One process, one thread per GPU:
// create_nccl_group makes all communicators with ncclCommInitAll.
//
// NVLink multicast (NVLS) is turned off: create_nccl_group sets
// NCCL_NVLS_ENABLE=0 in the environment before NCCL initialises, because the
// lent H200 machines require it (NVLS needs a fabric manager setup they do not
// have; with it on, communicator creation fails or hangs). Launch scripts set
// it too (bench/device.sh), so an NCCL test binary run by hand behaves alike.
//
// Built only when CMake finds nccl.h and libnccl (ss_nccl,
// SPECSTACK_HAVE_NCCL); without them tensor parallelism on CUDA stays off.
// Compiled, not yet run: no 2-GPU machine was lent when it was written
// (issue 13).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <vector>

#include "base/status.h"
#include "parallel/communicator.h"

namespace specstack::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` and `stream` (both on `device`).
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device, cudaStream_t stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // data: device f32 [count], summed in place over the ranks.
  void all_reduce_sum(float* data, int64_t count) override;
  // send: device f32 [count]; recv: device f32 [size() * count], rank order.
  void all_gather(const float* send, int64_t count, float* recv) override;
  // An all-reduce of one float, then the stream synchronised: every rank has
  // reached this point and all earlier collectives of this rank are done.
  void barrier() override;

  // The CUDA model's residual stream is bf16: the same all-reduce on
  // __nv_bfloat16 [count] (NCCL sums in higher precision inside a step).
  void all_reduce_sum_bf16(void* data, int64_t count);

 private:
  ncclComm_t comm_;
  int rank_;
  int size_;
  int device_;
  cudaStream_t stream_;
  float* barrier_scratch_ = nullptr;  // device f32 [1]
};

// One communicator per device in `devices` (rank r on devices[r]), after the
// start-up checks, each a one-line error: at least two devices listed, that
// many GPUs visible, peer access between every pair.
Result<std::vector<std::unique_ptr<NcclCommunicator>>> create_nccl_group(
    const std::vector<int>& devices);

}  // namespace specstack::cuda

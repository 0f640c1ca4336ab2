#include "cuda/nccl_communicator.h"

#include <cstdlib>
#include <string>

#include "base/check.h"

namespace specstack::cuda {
namespace {

// A failing collective mid-step cannot be recovered from (the other ranks are
// blocked in theirs): abort with the call and NCCL's reason, like SS_CHECK.
void check_nccl(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  const std::string message = std::string(what) + ": " + ncclGetErrorString(result) + " (" +
                              ncclGetLastError(nullptr) + ")";
  SS_CHECK_MSG(false, message.c_str());
}

void check_cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  const std::string message = std::string(what) + ": " + cudaGetErrorString(error);
  SS_CHECK_MSG(false, message.c_str());
}

}  // namespace

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int rank, int size, int device,
                                   cudaStream_t stream)
    : comm_(comm), rank_(rank), size_(size), device_(device), stream_(stream) {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda(cudaMalloc(&barrier_scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  ncclCommDestroy(comm_);
  cudaStreamDestroy(stream_);
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t count) {
  check_nccl(
      ncclAllReduce(data, data, static_cast<size_t>(count), ncclFloat32, ncclSum, comm_, stream_),
      "ncclAllReduce");
}

void NcclCommunicator::all_reduce_sum_bf16(void* data, int64_t count) {
  check_nccl(
      ncclAllReduce(data, data, static_cast<size_t>(count), ncclBfloat16, ncclSum, comm_, stream_),
      "ncclAllReduce (bf16)");
}

void NcclCommunicator::all_gather(const float* send, int64_t count, float* recv) {
  check_nccl(ncclAllGather(send, recv, static_cast<size_t>(count), ncclFloat32, comm_, stream_),
             "ncclAllGather");
}

void NcclCommunicator::barrier() {
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  all_reduce_sum(barrier_scratch_, 1);
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (barrier)");
}

Result<std::vector<std::unique_ptr<NcclCommunicator>>> create_nccl_group(
    const std::vector<int>& devices) {
  const int n = static_cast<int>(devices.size());
  if (n < 2) return errorf("tensor parallelism on CUDA needs at least 2 GPUs, {} given", n);
  int visible = 0;
  if (cudaError_t e = cudaGetDeviceCount(&visible); e != cudaSuccess) {
    return errorf("--tensor-parallel-size {}: no CUDA device ({})", n, cudaGetErrorString(e));
  }
  for (int d : devices) {
    if (d < 0 || d >= visible) {
      return errorf("--tensor-parallel-size {}: needs GPU {}, but {} GPU(s) are visible", n, d,
                    visible);
    }
  }
  for (int a : devices) {
    for (int b : devices) {
      if (a == b) continue;
      int can = 0;
      cudaDeviceCanAccessPeer(&can, a, b);
      if (can == 0) {
        return errorf("--tensor-parallel-size {}: GPU {} cannot access GPU {} (no peer access)", n,
                      a, b);
      }
    }
  }
  // Before any NCCL call reads its environment (see the header): NVLink
  // multicast off, whatever the caller's environment says.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  if (ncclResult_t r = ncclCommInitAll(comms.data(), n, devices.data()); r != ncclSuccess) {
    return errorf("--tensor-parallel-size {}: ncclCommInitAll failed: {}", n,
                  ncclGetErrorString(r));
  }
  std::vector<std::unique_ptr<NcclCommunicator>> group;
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(devices[static_cast<size_t>(r)]);
    cudaStream_t stream = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      for (int k = r; k < n; ++k) ncclCommDestroy(comms[static_cast<size_t>(k)]);
      return errorf("--tensor-parallel-size {}: cannot create a stream on GPU {}: {}", n,
                    devices[static_cast<size_t>(r)], cudaGetErrorString(e));
    }
    group.push_back(std::make_unique<NcclCommunicator>(comms[static_cast<size_t>(r)], r, n,
                                                       devices[static_cast<size_t>(r)], stream));
  }
  return group;
}

}  // namespace specstack::cuda

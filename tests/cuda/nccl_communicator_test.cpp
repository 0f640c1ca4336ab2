// NcclCommunicator on the GPUs of one host: all-reduce (f32 and bf16) and
// all-gather give what ThreadCommunicator gives on the same inputs. Needs 2+
// GPUs with peer access and a build with NCCL; skips otherwise, naming why.
// Written for issue 13's nvidia-h200-x2 run: not yet run on one.
#include <gtest/gtest.h>

#if SPECSTACK_HAVE_NCCL
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <thread>
#include <vector>

#include "cuda/nccl_communicator.h"
#include "parallel/thread_communicator.h"

namespace specstack::cuda {
namespace {

int visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::vector<float> rank_input(int rank, int64_t count) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = 0.25f * rank + 0.5f * (i % 7);
  return v;
}

TEST(NcclCommunicator, AllReduceAndAllGatherMatchTheThreadCommunicator) {
  const int n = visible_gpus();
  if (n < 2) GTEST_SKIP() << "needs 2 GPUs, " << n << " visible";
  std::vector<int> devices = {0, 1};
  auto group = create_nccl_group(devices);
  if (!group.ok()) GTEST_SKIP() << group.message();
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  const int64_t count = 4099;  // not a multiple of anything convenient
  // Expected: the same inputs through the host communicator (exact here: the
  // values are multiples of 1/4 and small, so any summation order agrees).
  ThreadCommunicatorGroup host(2);
  std::vector<std::vector<float>> expected(2);
  std::vector<std::vector<float>> gathered(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      expected[static_cast<size_t>(r)] = rank_input(r, count);
      std::vector<float> send = rank_input(r, count);
      gathered[static_cast<size_t>(r)].resize(static_cast<size_t>(2 * count));
      host.rank(r).all_gather(send.data(), count, gathered[static_cast<size_t>(r)].data());
      host.rank(r).all_reduce_sum(expected[static_cast<size_t>(r)].data(), count);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();

  std::vector<std::vector<float>> reduced(2), all(2), reduced_bf16(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclCommunicator& comm = *(*group)[static_cast<size_t>(r)];
      ASSERT_EQ(cudaSetDevice(comm.device()), cudaSuccess);
      const std::vector<float> in = rank_input(r, count);
      float* data = nullptr;
      float* recv = nullptr;
      __nv_bfloat16* half = nullptr;
      ASSERT_EQ(cudaMalloc(&data, count * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&recv, 2 * count * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&half, count * sizeof(__nv_bfloat16)), cudaSuccess);
      std::vector<__nv_bfloat16> in_bf16(in.begin(), in.end());
      cudaMemcpy(data, in.data(), count * sizeof(float), cudaMemcpyHostToDevice);
      cudaMemcpy(half, in_bf16.data(), count * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice);
      comm.all_gather(data, count, recv);
      comm.all_reduce_sum(data, count);
      comm.all_reduce_sum_bf16(half, count);
      comm.barrier();
      reduced[static_cast<size_t>(r)].resize(static_cast<size_t>(count));
      all[static_cast<size_t>(r)].resize(static_cast<size_t>(2 * count));
      std::vector<__nv_bfloat16> out_bf16(static_cast<size_t>(count));
      cudaMemcpy(reduced[static_cast<size_t>(r)].data(), data, count * sizeof(float),
                 cudaMemcpyDeviceToHost);
      cudaMemcpy(all[static_cast<size_t>(r)].data(), recv, 2 * count * sizeof(float),
                 cudaMemcpyDeviceToHost);
      cudaMemcpy(out_bf16.data(), half, count * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost);
      for (const auto& v : out_bf16) reduced_bf16[static_cast<size_t>(r)].push_back(float(v));
      cudaFree(data);
      cudaFree(recv);
      cudaFree(half);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(reduced[static_cast<size_t>(r)], expected[static_cast<size_t>(r)]) << "rank " << r;
    EXPECT_EQ(all[static_cast<size_t>(r)], gathered[static_cast<size_t>(r)]) << "rank " << r;
    // Inputs and sums are exact in bf16 (multiples of 1/4 below 8).
    EXPECT_EQ(reduced_bf16[static_cast<size_t>(r)], expected[static_cast<size_t>(r)]);
  }
}

TEST(NcclCommunicator, TooFewOrMissingGpusAreOneLineErrors) {
  auto one = create_nccl_group({0});
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.message().find("at least 2 GPUs"), std::string::npos);
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible";
  auto missing = create_nccl_group({0, 4096});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("needs GPU 4096"), std::string::npos) << missing.message();
}

}  // namespace
}  // namespace specstack::cuda

#else
TEST(NcclCommunicator, NotBuilt) {
  GTEST_SKIP() << "this build has no NCCL (nccl.h / libnccl not found at configure time)";
}
#endif

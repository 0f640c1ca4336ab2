// ThreadCommunicator: all-reduce and all-gather across N thread ranks give the
// exact rank-order results on every rank, whatever order the threads arrive in.
#include "parallel/thread_communicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

namespace specstack {
namespace {

// Runs body(rank) on `n` threads, one per rank of `group`.
void run_ranks(ThreadCommunicatorGroup& group, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < group.size(); ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

// Values whose float sum depends on the order they are added in: large and
// small magnitudes mixed, so a different reduction order gives other bits.
// Tabulated once so every use sees the same bits (no per-call-site FMA
// contraction of the formula).
float value(int rank, int64_t i) {
  static const std::vector<float> table = [] {
    std::vector<float> t;
    for (int r = 0; r < 8; ++r) {
      for (int64_t j = 0; j < 1000; ++j) {
        const float big = (r % 2 == 0) ? 1.0e7f : -1.0e7f;
        volatile float part = big * static_cast<float>((j % 5) + 1);
        t.push_back(part + 0.1f * static_cast<float>(r + 1) + 0.37f * static_cast<float>(j));
      }
    }
    return t;
  }();
  return table[static_cast<size_t>(rank * 1000 + i)];
}

std::vector<float> rank_order_sum(int n, int64_t count) {
  std::vector<float> sum(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    float s = value(0, i);
    for (int r = 1; r < n; ++r) s += value(r, i);
    sum[static_cast<size_t>(i)] = s;
  }
  return sum;
}

TEST(ThreadCommunicator, AllReduceGivesTheRankOrderSumOnEveryRank) {
  for (int n : {1, 2, 3, 4, 8}) {
    SCOPED_TRACE(n);
    ThreadCommunicatorGroup group(n);
    for (int64_t count :
         {int64_t{1}, int64_t{7}, int64_t{1000}}) {  // fewer elements than ranks too
      const std::vector<float> expected = rank_order_sum(n, count);
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      run_ranks(group, [&](int r) {
        Communicator& comm = group.rank(r);
        EXPECT_EQ(comm.rank(), r);
        EXPECT_EQ(comm.size(), n);
        auto& mine = data[static_cast<size_t>(r)];
        for (int64_t i = 0; i < count; ++i) mine.push_back(value(r, i));
        comm.all_reduce_sum(mine.data(), count);
      });
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(0, std::memcmp(data[static_cast<size_t>(r)].data(), expected.data(),
                                 expected.size() * sizeof(float)))
            << "rank " << r << " count " << count;
      }
    }
  }
}

TEST(ThreadCommunicator, AllGatherConcatenatesInRankOrder) {
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE(n);
    ThreadCommunicatorGroup group(n);
    const int64_t count = 5;
    std::vector<std::vector<float>> recv(static_cast<size_t>(n));
    run_ranks(group, [&](int r) {
      std::vector<float> send(count);
      for (int64_t i = 0; i < count; ++i) send[static_cast<size_t>(i)] = 100.0f * r + i;
      recv[static_cast<size_t>(r)].resize(static_cast<size_t>(n * count));
      group.rank(r).all_gather(send.data(), count, recv[static_cast<size_t>(r)].data());
      // The send buffer goes out of scope here: the gather must be complete.
    });
    for (int r = 0; r < n; ++r) {
      for (int src = 0; src < n; ++src) {
        for (int64_t i = 0; i < count; ++i) {
          EXPECT_EQ(recv[static_cast<size_t>(r)][static_cast<size_t>(src * count + i)],
                    100.0f * src + i);
        }
      }
    }
  }
}

TEST(ThreadCommunicator, ResultsAreBitwiseEqualAcross50RunsWithRandomArrivalOrder) {
  const int n = 4;
  const int64_t count = 257;
  const std::vector<float> expected = rank_order_sum(n, count);
  ThreadCommunicatorGroup group(n);
  std::mt19937 rng(7);
  for (int run = 0; run < 50; ++run) {
    std::vector<int> delay_us(n);
    for (int& d : delay_us) d = static_cast<int>(rng() % 300);
    std::vector<std::vector<float>> data(static_cast<size_t>(n));
    run_ranks(group, [&](int r) {
      auto& mine = data[static_cast<size_t>(r)];
      for (int64_t i = 0; i < count; ++i) mine.push_back(value(r, i));
      // Ranks arrive in a different order every run.
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us[static_cast<size_t>(r)]));
      group.rank(r).all_reduce_sum(mine.data(), count);
      group.rank(r).all_reduce_sum(mine.data(), count);  // back to back: buffers reused
    });
    std::vector<float> twice(expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {  // n equal rows, added in rank order
      float s = expected[i];
      for (int r = 1; r < n; ++r) s += expected[i];
      twice[i] = s;
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(0, std::memcmp(data[static_cast<size_t>(r)].data(), twice.data(),
                               twice.size() * sizeof(float)))
          << "run " << run << " rank " << r;
    }
  }
}

TEST(ThreadCommunicator, BarrierWaitsForEveryRank) {
  const int n = 8;
  ThreadCommunicatorGroup group(n);
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  run_ranks(group, [&](int r) {
    std::this_thread::sleep_for(std::chrono::microseconds(50 * r));
    arrived.fetch_add(1);
    group.rank(r).barrier();
    if (arrived.load() != n) early.fetch_add(1);
  });
  EXPECT_EQ(early.load(), 0);
}

}  // namespace
}  // namespace specstack

// Load-time conversions of whole tensors (dequantizing a checkpoint's
// matrices, filling dummy weights) run before any ThreadPool exists: they
// split [0, n) into contiguous shares, one per hardware thread once the work
// reaches 2^20 elements (one share below that), run share 0 on the calling
// thread and the rest on fresh threads, and return when all are done.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace specstack {

// Shares for `work` elements of conversion.
inline int64_t load_share_count(int64_t work) {
  if (work < (int64_t{1} << 20)) return 1;
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

// fn(share, begin, end) for share 0 .. shares - 1 over [0, n) in equal
// contiguous ranges (the last ones may be empty).
template <class Fn>
void run_load_shares(int64_t n, int64_t shares, Fn&& fn) {
  const int64_t chunk = (n + shares - 1) / shares;
  auto run = [&](int64_t share) {
    fn(share, std::min(n, share * chunk), std::min(n, (share + 1) * chunk));
  };
  std::vector<std::thread> threads;
  for (int64_t share = 1; share < shares; ++share) threads.emplace_back(run, share);
  run(0);
  for (auto& thread : threads) thread.join();
}

}  // namespace specstack

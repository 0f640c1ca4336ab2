// Small pieces the benchmark commands (bench ttft, bench spec) share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace specstack::cli {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// `length` ids in [3, vocab) drawn from (seed, length, stream): the same
// prompt for the same three, a different one for another stream.
inline std::vector<int32_t> seeded_prompt(uint32_t seed, int64_t length, int32_t stream,
                                          int64_t vocab) {
  std::seed_seq seq{seed, static_cast<uint32_t>(length), static_cast<uint32_t>(stream)};
  std::mt19937_64 rng(seq);
  std::vector<int32_t> prompt(static_cast<size_t>(length));
  for (auto& id : prompt) id = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 3));
  return prompt;
}

}  // namespace specstack::cli

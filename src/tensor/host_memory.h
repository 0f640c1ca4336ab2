// Zero-filled host storage for tensors. Small buffers come from the heap and
// are memset; large ones (the KV pool: gigabytes) are anonymous memory maps,
// which the kernel zero-fills page by page on first touch. So reserving a
// 2 GiB pool costs no time and no resident memory until blocks are used,
// and `serve` listens right after the weights load.
#pragma once

#include <cstddef>
#include <memory>

namespace specstack {

struct ZeroedAllocation {
  std::shared_ptr<void> memory;  // 64-byte aligned (page aligned when mapped)
  bool lazy = false;             // mapped: pages materialise on first touch
};

// Buffers at or above this size are mapped lazily. Below it a mapping would
// waste most of a page and a syscall on what a memset does in microseconds.
inline constexpr size_t kLazyZeroThresholdBytes = size_t{1} << 20;

// `bytes` zero bytes (at least 64), 64-byte aligned. Aborts when the memory
// cannot be had, like operator new.
ZeroedAllocation allocate_zeroed(size_t bytes);

// Bytes of [data, data + bytes) that are resident in RAM now (mincore), for
// reporting how much of a lazily mapped pool has been touched.
size_t resident_bytes(const void* data, size_t bytes);

}  // namespace specstack

#include "tensor/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/check.h"

namespace specstack {
namespace {

size_t page_size() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

ZeroedAllocation allocate_zeroed(size_t bytes) {
  ZeroedAllocation out;
  size_t padded = (bytes + 63) / 64 * 64;
  if (padded == 0) padded = 64;
  if (padded < kLazyZeroThresholdBytes) {
    void* mem = std::aligned_alloc(64, padded);
    SS_CHECK_MSG(mem != nullptr, "out of host memory");
    std::memset(mem, 0, padded);
    out.memory = std::shared_ptr<void>(mem, [](void* p) { std::free(p); });
    return out;
  }
  // MAP_NORESERVE is not used: the pool should fail here, at start-up, if
  // the system's overcommit policy cannot back it, not at some later touch.
  void* mem = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  SS_CHECK_MSG(mem != MAP_FAILED, "out of host memory (mmap of a zeroed buffer failed)");
#ifdef MADV_HUGEPAGE
  // Where transparent huge pages are set to "madvise", ask for them: the KV
  // pool is read in large strides, and 2 MiB pages save TLB misses. Advice
  // only; a kernel without THP returns an error we can ignore.
  (void)madvise(mem, padded, MADV_HUGEPAGE);
#endif
  out.memory = std::shared_ptr<void>(mem, [padded](void* p) { munmap(p, padded); });
  out.lazy = true;
  return out;
}

size_t resident_bytes(const void* data, size_t bytes) {
  if (data == nullptr || bytes == 0) return 0;
  const size_t page = page_size();
  const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + bytes + page - 1) / page * page;
  std::vector<unsigned char> pages((end - begin) / page);
  // mincore only fails for unmapped ranges or a bad address: report nothing
  // resident rather than abort a metrics scrape.
  if (mincore(reinterpret_cast<void*>(begin), end - begin, pages.data()) != 0) return 0;
  size_t n = 0;
  for (unsigned char p : pages) n += p & 1u;
  return std::min(n * page, bytes);
}

}  // namespace specstack

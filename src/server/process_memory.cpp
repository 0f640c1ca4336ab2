#include "server/process_memory.h"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>

namespace specstack {

int64_t process_resident_bytes() {
  // statm: size resident shared text lib data dt, in pages. One read of a
  // short file; no parsing of the larger /proc/self/status.
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return -1;
  long long size_pages = 0, resident_pages = 0;
  const int n = std::fscanf(file, "%lld %lld", &size_pages, &resident_pages);
  std::fclose(file);
  if (n != 2) return -1;
  return static_cast<int64_t>(resident_pages) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

void release_free_heap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

HeapStats heap_stats() {
  HeapStats stats;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  // Walks every arena under its lock: fine for a scrape, not for a hot path.
  const struct mallinfo2 info = mallinfo2();
  stats.in_use_bytes = static_cast<int64_t>(info.uordblks + info.hblkhd);
  stats.held_bytes = static_cast<int64_t>(info.arena + info.hblkhd);
#endif
  return stats;
}

}  // namespace specstack

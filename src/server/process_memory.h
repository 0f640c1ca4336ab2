// The server process's own memory, for /metrics (process_resident_memory_bytes,
// the Prometheus client libraries' standard name).
#pragma once

#include <cstdint>

namespace specstack {

// Resident set size in bytes from /proc/self/statm; -1 where that file is
// missing (not Linux) or unreadable.
int64_t process_resident_bytes();

// The C allocator's view (glibc mallinfo2), which splits RSS growth into
// live allocations (a leak or a growing cache raises in_use) and memory the
// allocator holds but no object uses (fragmentation: only held rises).
struct HeapStats {
  int64_t in_use_bytes = -1;  // allocated and not freed (arenas and mmapped chunks)
  int64_t held_bytes = -1;    // obtained from the system by malloc, in use or not
};
HeapStats heap_stats();

// Returns the free pages malloc holds to the system (glibc malloc_trim: in
// every arena, not only the top of the main heap as free() does). Takes each
// arena's lock in turn; meant for a timer, not a request path.
void release_free_heap();

}  // namespace specstack

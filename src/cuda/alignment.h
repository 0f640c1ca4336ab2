// Alignment checks of the kernels' launch wrappers (host side): 16-byte
// vector loads, cp.async and TMA copies need their operands aligned.
#pragma once

#include <cstdint>

namespace specstack::cuda {

inline bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

inline bool aligned16(const void* p) {
  return aligned(p, 16);
}

}  // namespace specstack::cuda

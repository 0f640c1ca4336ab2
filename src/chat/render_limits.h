// Bounds on one chat-template render. Templates ship inside model folders, so
// a hostile or buggy one must fail with an error instead of exhausting memory,
// stack or time. The defaults leave room for million-token prompts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specstack {

struct ChatRenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // rendered text and any one string (<= 64 MiB)
  size_t max_list_items = size_t{1} << 20;     // any one list or dict
  uint32_t max_value_depth = 64;               // nesting of lists/dicts (context included)
  int max_call_depth = 20;                     // macro recursion
  uint64_t max_work = uint64_t{1} << 26;       // ~ nodes evaluated + bytes copied / 64
};

}  // namespace specstack

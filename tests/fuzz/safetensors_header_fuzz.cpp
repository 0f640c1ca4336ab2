// libFuzzer target: parse_safetensors_header on arbitrary bytes. Besides "no
// crash", an accepted header must satisfy what WeightFiles relies on to form
// views, so a validation gap shows up as an abort here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  specstack::Result<specstack::SafetensorsHeader> header =
      specstack::parse_safetensors_header(file);
  if (!header.ok()) {
    if (header.message().empty()) std::abort();
    return 0;
  }
  if (header->data_offset < 8 || header->data_offset > size) std::abort();
  uint64_t data_size = size - header->data_offset;
  for (const specstack::SafetensorsEntry& t : header->tensors) {
    if (t.begin > t.end || t.end > data_size) std::abort();
    uint64_t numel = 1;
    for (int64_t dim : t.shape) {
      if (dim < 0) std::abort();
      numel *= static_cast<uint64_t>(dim);
    }
    if (numel * specstack::dtype_size(t.dtype) != t.end - t.begin) std::abort();
  }
  return 0;
}

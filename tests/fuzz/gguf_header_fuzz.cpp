// libFuzzer target: parse_gguf on arbitrary bytes (header, metadata of every
// value type, tensor infos). Besides "no crash and no huge allocation", an
// accepted file must satisfy what the loader relies on to read tensor bytes,
// so a validation gap shows up as an abort here.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view file(reinterpret_cast<const char*>(data), size);
  specstack::Result<specstack::gguf::Header> header = specstack::gguf::parse_gguf(file);
  if (!header.ok()) {
    if (header.message().empty()) std::abort();
    return 0;
  }
  const uint64_t a = header->alignment;
  if (a == 0 || (a & (a - 1)) != 0) std::abort();
  for (const specstack::gguf::TensorInfo& t : header->tensors) {
    if (t.offset % a != 0) std::abort();
    if (header->data_offset > size || t.offset > size - header->data_offset ||
        t.nbytes > size - header->data_offset - t.offset) {
      std::abort();
    }
    if (t.dims.empty() || t.dims.size() > 4) std::abort();
    for (int64_t d : t.dims) {
      if (d <= 0) std::abort();
    }
  }
  // The metadata-only parse must agree with the full one on the metadata.
  auto meta = specstack::gguf::parse_gguf_metadata(file);
  if (!meta.ok() || meta->metadata.size() != header->metadata.size()) std::abort();
  return 0;
}

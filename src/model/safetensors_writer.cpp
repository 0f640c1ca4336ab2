#include "model/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace specstack {
namespace {

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI32:
      return "I32";
    case DType::kF8E4M3:
      return "F8_E4M3";
    default:
      return "?";  // block-quantized types have no safetensors dtype
  }
}

}  // namespace

Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second) return errorf("duplicate tensor name '{}'", name);
    if (dtype_is_quantized(tensor.dtype())) {
      return errorf("tensor '{}' is {}: safetensors has no block-quantized dtypes", name,
                    dtype_name(tensor.dtype()));
    }
    header[name] = {{"dtype", safetensors_dtype(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string text = header.dump();
  // Pad the header with spaces so the data section starts 8-byte aligned.
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return errorf("cannot write {}: {}", path, std::strerror(errno));
  const uint64_t length = text.size();
  unsigned char length_bytes[8];
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(reinterpret_cast<const char*>(length_bytes), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, tensor] : tensors) {
    out.write(static_cast<const char*>(tensor.raw()),
              static_cast<std::streamsize>(tensor.nbytes()));
  }
  out.flush();
  if (!out) return errorf("error writing {}", path);
  return {};
}

}  // namespace specstack

// safetensors reading: a strict header parser (untrusted bytes: every offset,
// dtype and shape is validated against the file) and WeightFiles, which maps
// one file or an HF sharded set and hands out zero-copy tensor views.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "tensor/tensor.h"

namespace specstack {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section (after the header)
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;          // in header order
  std::map<std::string, std::string> metadata;   // "__metadata__" (string values)
  uint64_t data_offset = 0;                       // 8 + header length
};

// Parses and validates the header of a whole safetensors file held in `file`
// (8-byte little-endian header length, JSON header, data section). Checks:
// length within the file, valid JSON object, known dtype (F32/BF16/F16, and
// I32 for reference tensors; others are reported by name), non-negative shape,
// end-begin == numel*dtype size, offsets inside the data section and
// non-overlapping.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view file);

// The weight files of a model folder: model.safetensors, or the shards named by
// model.safetensors.index.json ("weight_map").
class WeightFiles {
 public:
  static Result<WeightFiles> open(const std::string& model_dir);

  bool contains(const std::string& name) const;
  // A view into the mapped file. Errors if the name is missing.
  Result<Tensor> get(const std::string& name) const;
  // Every tensor name, sorted.
  std::vector<std::string> names() const;
  // "__metadata__" entries merged across shards.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t total_bytes() const;

 private:
  struct Location {
    size_t file_index;
    SafetensorsEntry entry;
  };
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::vector<uint64_t> data_offsets_;
  std::unordered_map<std::string, Location> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace specstack

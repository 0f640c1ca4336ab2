// GGUF reading (v2 and v3, little-endian). parse_gguf validates untrusted
// bytes completely: every count is checked against the bytes left before
// anything is allocated, every tensor's type, shape, byte size, alignment and
// range against the data section, so a malformed file is an Error naming the
// problem (with its byte offset), never a crash or a huge allocation.
// GgufFile maps a file and hands out each tensor's raw bytes in place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "gguf/gguf_types.h"
#include "gguf/gguf_value.h"

namespace specstack::gguf {

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the contiguous row length
  uint32_t type = 0;          // raw ggml_type id (see gguf_types.h)
  uint64_t offset = 0;        // from the start of the data section
  uint64_t nbytes = 0;
  int64_t numel() const;
  // Row-major shape as the model sees it: dims reversed ([out, in] for a matrix).
  std::vector<int64_t> shape() const;
};

struct Header {
  uint32_t version = 0;
  std::vector<std::pair<std::string, Value>> metadata;   // in file order
  std::vector<TensorInfo> tensors;                       // in file order
  uint64_t alignment = 32;                               // general.alignment or 32
  uint64_t data_offset = 0;                              // start of the data section in the file
  std::unordered_map<std::string, size_t> tensor_index;  // name -> position in tensors

  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed reads; errors name the key and, on a mismatch, the stored type.
  Result<int64_t> get_int(std::string_view key) const;   // any integer type
  Result<double> get_float(std::string_view key) const;  // float or integer
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<const Array*> get_array(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;
};

// Parses a whole GGUF file held in memory.
Result<Header> parse_gguf(std::string_view file);
// Parses only the header and metadata (no tensor-info or data checks): what
// the fuzz target and quick inspection need. Stops after the metadata.
Result<Header> parse_gguf_metadata(std::string_view file);

class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);

  const Header& header() const { return header_; }
  const std::string& path() const { return file_->path(); }
  // The tensor's bytes inside the mapping (valid while any copy of this
  // GgufFile, or the returned owner, is alive).
  const uint8_t* tensor_data(const TensorInfo& info) const;
  std::shared_ptr<const MappedFile> owner() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  Header header_;
};

// True when `path` names a GGUF file (by its magic, not its extension).
bool is_gguf_file(const std::string& path);

}  // namespace specstack::gguf

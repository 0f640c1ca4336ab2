// A read-only memory-mapped file. Model weights are used in place from the
// mapping (never copied), so a MappedFile must outlive every tensor view into it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace specstack {

class MappedFile {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }

  // Whether [p, p + n) lies inside this mapping.
  bool contains(const void* p, size_t n) const;

  // Drops the whole pages inside [p, p + n) (a range of this mapping) from
  // this process's resident set (MADV_DONTNEED), for bytes that were copied
  // out and will not be read here again: the mapping is private and never
  // written, so a later read faults the file's bytes back in, and the page
  // cache keeps them for the next process that loads the file.
  void release(const void* p, size_t n) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file, e.g. config.json.
Result<std::string> read_text_file(const std::string& path);

}  // namespace specstack

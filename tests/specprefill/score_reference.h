// Reads the score.* tensors of tests/data/golden reference.safetensors.
// engine/golden_reference.h (GoldenReference) needs ss_model's safetensors
// parser, which test_specprefill does not link (the layer sits below model),
// so this is a minimal reader for our own trusted test file: F32 and I32
// tensors, copied out by name.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/mapped_file.h"

namespace specstack::testing {

class ScoreReference {
 public:
  explicit ScoreReference(const std::string& path) {
    auto file = MappedFile::open(path);
    SS_CHECK_MSG(file.ok(), file.ok() ? "" : file.message());
    file_ = *file;
    SS_CHECK_GE(file_->size(), 8u);
    uint64_t header_len = 0;
    std::memcpy(&header_len, file_->data(), 8);  // little-endian host
    SS_CHECK_LE(8 + header_len, file_->size());
    auto header = nlohmann::json::parse(file_->bytes().substr(8, header_len));
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") continue;
      Entry e;
      e.dtype = entry.at("dtype").get<std::string>();
      e.shape = entry.at("shape").get<std::vector<int64_t>>();
      e.begin = 8 + header_len + entry.at("data_offsets")[0].get<uint64_t>();
      e.end = 8 + header_len + entry.at("data_offsets")[1].get<uint64_t>();
      SS_CHECK_LE(e.end, file_->size());
      entries_[name] = e;
    }
  }

  std::vector<int64_t> shape(const std::string& name) const { return find(name).shape; }
  std::vector<float> f32(const std::string& name) const { return copy<float>(name, "F32"); }
  std::vector<int32_t> i32(const std::string& name) const { return copy<int32_t>(name, "I32"); }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;
  };

  const Entry& find(const std::string& name) const {
    auto it = entries_.find(name);
    SS_CHECK_MSG(it != entries_.end(), "missing reference tensor " + name);
    return it->second;
  }
  template <typename T>
  std::vector<T> copy(const std::string& name, const char* dtype) const {
    const Entry& e = find(name);
    SS_CHECK_MSG(e.dtype == dtype, name + " is " + e.dtype);
    SS_CHECK_EQ((e.end - e.begin) % sizeof(T), 0u);
    std::vector<T> out((e.end - e.begin) / sizeof(T));
    std::memcpy(out.data(), file_->data() + e.begin, e.end - e.begin);
    return out;
  }

  std::shared_ptr<MappedFile> file_;
  std::map<std::string, Entry> entries_;
};

}  // namespace specstack::testing

// Reads tests/data/golden reference.safetensors files (HF transformers outputs)
// for the model-correctness tests.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "model/safetensors.h"
#include "tensor/tensor.h"

namespace specstack::testing {

class GoldenReference {
 public:
  explicit GoldenReference(const std::string& path) {
    auto file = MappedFile::open(path);
    SS_CHECK_MSG(file.ok(), file.ok() ? "" : file.message());
    file_ = *file;
    auto header = parse_safetensors_header(file_->bytes());
    SS_CHECK_MSG(header.ok(), header.ok() ? "" : header.message());
    for (const auto& entry : header->tensors) {
      void* data = const_cast<uint8_t*>(file_->data() + header->data_offset + entry.begin);
      tensors_[entry.name] = Tensor::view(data, entry.dtype, entry.shape, file_);
    }
  }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const Tensor& get(const std::string& name) const {
    auto it = tensors_.find(name);
    SS_CHECK_MSG(it != tensors_.end(), "missing reference tensor " + name);
    return it->second;
  }
  std::vector<int32_t> ids(const std::string& name) const {
    const Tensor& t = get(name);
    SS_CHECK(t.dtype() == DType::kI32);
    return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, Tensor> tensors_;
};

// ‖a − b‖ / ‖b‖ over n floats.
inline double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0, ref = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

inline int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace specstack::testing

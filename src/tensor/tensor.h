// Tensor: a typed, shaped view of contiguous row-major memory. The storage is
// kept alive by `owner` (a heap buffer or a memory-mapped weight file), so
// views into mmap'd safetensors are zero-copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/dtype.h"

namespace specstack {

enum class Device : uint8_t { kCpu, kCuda };

class Tensor {
 public:
  Tensor() = default;

  // Zero-filled host storage, 64-byte aligned; large tensors are mapped
  // lazily (tensor/host_memory.h), so their pages cost nothing until touched.
  static Tensor zeros(DType dtype, std::vector<int64_t> shape);
  // A view of memory owned by `owner` (device memory with device = kCuda:
  // only its shape, dtype and pointer are used on the host).
  static Tensor view(void* data, DType dtype, std::vector<int64_t> shape,
                     std::shared_ptr<const void> owner, Device device = Device::kCpu);

  bool defined() const { return !shape_.empty(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const {
    SS_CHECK_LT(axis, dim());
    return shape_[static_cast<size_t>(axis)];
  }
  int64_t numel() const;
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }
  std::string shape_string() const;

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }
  float* f32() {
    SS_CHECK(dtype_ == DType::kF32);
    return static_cast<float*>(data_);
  }
  const float* f32() const {
    SS_CHECK(dtype_ == DType::kF32);
    return static_cast<const float*>(data_);
  }

  // Rows [begin, end) of the leading axis, as a view sharing storage.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Same storage, new shape with the same element count.
  Tensor reshape(std::vector<int64_t> shape) const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_ = Device::kCpu;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> owner_;
};

}  // namespace specstack

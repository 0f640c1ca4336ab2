#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

namespace specstack {

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

std::string Tensor::shape_string() const {
  std::string out = "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape_[i]);
  }
  return out + "]";
}

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  size_t bytes = t.nbytes();
  size_t padded = (bytes + 63) / 64 * 64;
  if (padded == 0) padded = 64;
  void* mem = std::aligned_alloc(64, padded);
  SS_CHECK_MSG(mem != nullptr, "out of host memory");
  std::memset(mem, 0, padded);
  t.owner_ = std::shared_ptr<const void>(mem, [](const void* p) { std::free(const_cast<void*>(p)); });
  t.data_ = mem;
  return t;
}

Tensor Tensor::view(void* data, DType dtype, std::vector<int64_t> shape,
                    std::shared_ptr<const void> owner, Device device) {
  Tensor t;
  t.device_ = device;
  t.data_ = data;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  SS_CHECK(!shape_.empty());
  SS_CHECK_LE(0, begin);
  SS_CHECK_LE(begin, end);
  SS_CHECK_LE(end, shape_[0]);
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  Tensor t = *this;
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + begin * row * static_cast<int64_t>(dtype_size(dtype_));
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  SS_CHECK_EQ(t.numel(), numel());
  return t;
}

}  // namespace specstack

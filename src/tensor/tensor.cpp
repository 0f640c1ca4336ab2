#include "tensor/tensor.h"

#include "tensor/host_memory.h"

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
  ZeroedAllocation storage = allocate_zeroed(t.nbytes());
  t.data_ = storage.memory.get();
  t.owner_ = std::move(storage.memory);
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
  SS_CHECK_MSG(dtype_ != DType::kQ8_0P, "q8_0p rows are interleaved in panels: not sliceable");
  Tensor t = *this;
  t.shape_[0] = end - begin;
  SS_CHECK_EQ(row % dtype_block_elements(dtype_), 0);  // rows of whole blocks
  t.data_ = static_cast<char*>(data_) + static_cast<int64_t>(dtype_bytes(dtype_, begin * row));
  return t;
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  Tensor t = *this;
  t.shape_ = std::move(shape);
  SS_CHECK_EQ(t.numel(), numel());
  return t;
}

}  // namespace specstack

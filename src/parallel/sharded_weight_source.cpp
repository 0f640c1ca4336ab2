#include "parallel/sharded_weight_source.h"

#include <cstring>

namespace specstack {

Result<Tensor> copy_slice(const Tensor& full, int axis, int64_t begin, int64_t count) {
  if (full.device() != Device::kCpu)
    return make_error("tensor parallelism: weights must be on the host");
  std::vector<int64_t> shape = full.shape();
  if (axis >= full.dim() || begin < 0 || begin + count > shape[static_cast<size_t>(axis)]) {
    return errorf("tensor parallelism: slice [{}, {}) of axis {} is outside shape {}", begin,
                  begin + count, axis, full.shape_string());
  }
  shape[static_cast<size_t>(axis)] = count;
  Tensor out = Tensor::zeros(full.dtype(), shape);
  const auto* src = static_cast<const uint8_t*>(full.raw());
  auto* dst = static_cast<uint8_t*>(out.raw());
  if (axis == 0) {  // one contiguous run of whole rows
    const size_t row_bytes = full.nbytes() / static_cast<size_t>(full.size(0));
    std::memcpy(dst, src + static_cast<size_t>(begin) * row_bytes,
                static_cast<size_t>(count) * row_bytes);
    return out;
  }
  if (dtype_block_elements(full.dtype()) != 1) {
    return errorf("tensor parallelism: cannot split the columns of a block-quantized {} tensor",
                  full.shape_string());
  }
  // [rows, cols] -> [rows, count]: a strided copy, one run per row.
  const size_t elem = dtype_size(full.dtype());
  const int64_t rows = full.size(0);
  const int64_t cols = full.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + static_cast<size_t>(r * count) * elem,
                src + static_cast<size_t>(r * cols + begin) * elem,
                static_cast<size_t>(count) * elem);
  }
  return out;
}

Result<Tensor> ShardedWeightSource::get(const std::string& name, const std::vector<int64_t>& shape,
                                        bool is_norm) {
  const TensorShard shard = plan_.tensor_shard(name, rank_);
  if (shard.axis < 0) return full_.get(name, shape, is_norm);
  std::vector<int64_t> full_shape = shape;  // the rank's shape with the split axis whole
  SS_CHECK_LT(static_cast<size_t>(shard.axis), full_shape.size());
  SS_CHECK_EQ(full_shape[static_cast<size_t>(shard.axis)], shard.count);
  full_shape[static_cast<size_t>(shard.axis)] = shard.full;
  SS_ASSIGN_OR_RETURN(Tensor full, full_.get(name, full_shape, is_norm));
  if (shard.axis == 0 && full_.tensors_are_views()) {
    return full.slice_rows(shard.begin, shard.begin + shard.count);
  }
  return copy_slice(full, shard.axis, shard.begin, shard.count);
}

}  // namespace specstack

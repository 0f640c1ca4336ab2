#include "cuda/device_dummy_source.h"

#include "cuda/cuda_kv_cache.h"
#include "cuda/elementwise.h"

namespace specstack::cuda {

Result<Tensor> DeviceDummySource::get(const std::string& name, const std::vector<int64_t>& shape,
                                      bool is_norm) {
  const uint64_t stream_seed = dummy_stream_seed(seed_, name);
  if (shape.size() == 1) return make_dummy_tensor(host_dtype_, shape, stream_seed, is_norm);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::shared_ptr<uint8_t> storage = device_alloc_shared(static_cast<size_t>(n) * sizeof(bf16));
  fill_dummy_bf16(reinterpret_cast<bf16*>(storage.get()), n, stream_seed, dummy_amplitude(),
                  stream_);
  return Tensor::view(storage.get(), DType::kBF16, shape, storage, Device::kCuda);
}

}  // namespace specstack::cuda

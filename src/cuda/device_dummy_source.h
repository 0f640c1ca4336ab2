// DeviceDummySource: --dummy-weights generated directly in device memory
// (bf16, the same values as the CPU generator), so a 32B benchmark never
// needs 65 GB of host memory. 1-D tensors (norms, biases) stay on the host,
// as build_weights expects.
#pragma once

#include <cuda_runtime.h>

#include "model/weights.h"

namespace specstack::cuda {

class DeviceDummySource final : public WeightSource {
 public:
  DeviceDummySource(DType host_dtype, uint64_t seed, cudaStream_t stream)
      : host_dtype_(host_dtype), seed_(seed), stream_(stream) {}
  bool has(const std::string&) const override { return true; }
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                     bool is_norm) override;

 private:
  DType host_dtype_;
  uint64_t seed_;
  cudaStream_t stream_;
};

}  // namespace specstack::cuda

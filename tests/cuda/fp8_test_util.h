// Test helper for the FP8 (e4m3) kernels: a matrix quantized per row on the
// device (quantize_rows_fp8), with its e4m3 values and scales copied to the
// host for CPU twins.
#pragma once

#include <cuda_fp8.h>

#include <vector>

#include "cuda/fp8_quantize.h"
#include "cuda_test_util.h"

namespace specstack::cuda::testing {

// Device e4m3 rows + per-row scales, and their host copy.
struct DeviceFp8Weight {
  DeviceBuffer<fp8> q;
  DeviceBuffer<float> scale;
  std::vector<float> q_host, scale_host;  // [rows, cols] e4m3 values (unscaled), [rows]
};

// w [rows, cols] (values rounded to bf16 on the way up) quantized on the device.
inline DeviceFp8Weight quantize_on_device(const std::vector<float>& w, int64_t rows, int64_t cols,
                                          cudaStream_t stream) {
  DeviceFp8Weight d;
  auto d_w = upload(to_bf16(w));
  d.q.resize(size_t(rows * cols));
  d.scale.resize(size_t(rows));
  quantize_rows_fp8(d_w.data(), cols, rows, cols, d.q.data(), d.scale.data(), stream, false);
  SS_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<fp8> q = d.q.download();
  d.q_host.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) d.q_host[i] = static_cast<float>(q[i]);
  d.scale_host = d.scale.download();
  return d;
}

}  // namespace specstack::cuda::testing

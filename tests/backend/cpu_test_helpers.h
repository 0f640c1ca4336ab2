// Shared helpers for the CPU kernel tests: seeded random tensors, weights
// rounded to a storage dtype, and the normwise relative error ‖a−b‖/‖b‖.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace specstack::testing {

inline Tensor random_f32(std::mt19937& rng, std::vector<int64_t> shape, float lo = -1.0f,
                         float hi = 1.0f) {
  Tensor t = Tensor::zeros(DType::kF32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = dist(rng);
  return t;
}

// A [rows, cols] weight stored as `dtype`, plus the exact values it holds
// (after rounding) as doubles, so references see the same numbers.
struct TestWeight {
  Tensor tensor;
  std::vector<double> values;  // [rows * cols]
};

inline TestWeight random_weight(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  TestWeight w{Tensor::zeros(dtype, {rows, cols}), std::vector<double>(size_t(rows * cols))};
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = dist(rng);
    switch (dtype) {
      case DType::kF32:
        w.tensor.data<float>()[i] = v;
        break;
      case DType::kBF16:
        w.tensor.data<uint16_t>()[i] = f32_to_bf16(v);
        v = bf16_to_f32(w.tensor.data<uint16_t>()[i]);
        break;
      case DType::kF16:
        w.tensor.data<uint16_t>()[i] = f32_to_f16(v);
        v = f16_to_f32(w.tensor.data<uint16_t>()[i]);
        break;
      default:
        break;
    }
    w.values[size_t(i)] = v;
  }
  return w;
}

inline double rel_error(const float* ours, const double* ref, int64_t n) {
  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (ours[i] - ref[i]) * (ours[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  if (norm == 0.0) return std::sqrt(diff);
  return std::sqrt(diff / norm);
}

inline double rel_error(const Tensor& ours, const std::vector<double>& ref) {
  return rel_error(ours.f32(), ref.data(), ours.numel());
}

inline double rel_error(const Tensor& ours, const Tensor& ref) {
  std::vector<double> wide(ref.f32(), ref.f32() + ref.numel());
  return rel_error(ours.f32(), wide.data(), ours.numel());
}

inline Tensor copy_of(const Tensor& t) {
  Tensor out = Tensor::zeros(t.dtype(), t.shape());
  std::memcpy(out.raw(), t.raw(), t.nbytes());
  return out;
}

}  // namespace specstack::testing

// Random quantized weights for the quantized kernel tests: random bytes with
// the f16 scale fields set to sane values.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "backend/cpu/quant_kernels.h"
#include "cpu_test_helpers.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace specstack::testing {

// Activations [n, in] in [-2, 2] with outliers, so that blocks differ in
// scale as real activations do.
inline Tensor activations(std::mt19937& rng, int64_t n, int64_t in) {
  Tensor x = random_f32(rng, {n, in}, -2.0f, 2.0f);
  for (int64_t i = 0; i < n * in; i += 89) x.f32()[i] *= 25.0f;
  return x;
}

// x's rows as Q8_0 activation blocks, as every int8 path quantizes them.
inline std::vector<cpu::quant::BlockQ8_0> act_blocks(const Tensor& x) {
  const int64_t n = x.size(0), in = x.size(1);
  std::vector<cpu::quant::BlockQ8_0> a(size_t(n * in / 32));
  for (int64_t i = 0; i < n; ++i)
    cpu::quantize_activations(cpu::QuantAct::kQ8_0, x.f32() + i * in, in, a.data() + i * in / 32);
  return a;
}

// Offsets of the f16 scale fields of each block type, set to sane values
// after the rest of the block is random bytes (random bits would give NaN
// or huge scales).
struct ScaleFields {
  std::vector<size_t> offsets;
  float max_scale;
};

inline ScaleFields scale_fields(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return {{0}, 0.01f};
    case DType::kQ4_0:
      return {{0}, 0.1f};
    case DType::kQ5_0:
      return {{0}, 0.05f};
    case DType::kQ4_K:
      return {{0, 2}, 0.01f};
    case DType::kQ5_K:
      return {{0, 2}, 0.005f};
    default:
      return {{208}, 0.001f};  // Q6_K: d after ql, qh, scales
  }
}

inline Tensor random_quantized(std::mt19937& rng, DType dtype, int64_t rows, int64_t cols) {
  Tensor w = Tensor::zeros(dtype, {rows, cols});
  auto* bytes = static_cast<uint8_t*>(w.raw());
  for (size_t i = 0; i < w.nbytes(); ++i) bytes[i] = static_cast<uint8_t>(rng());
  const ScaleFields f = scale_fields(dtype);
  std::uniform_real_distribution<float> dist(0.1f * f.max_scale, f.max_scale);
  const size_t block = dtype_block_bytes(dtype);
  for (size_t b = 0; b < w.nbytes() / block; ++b) {
    for (size_t off : f.offsets) {
      const uint16_t h = f32_to_f16(dist(rng));
      std::memcpy(bytes + b * block + off, &h, 2);
    }
  }
  return w;
}

// The activation blocks' values d * q, as doubles.
inline std::vector<double> decode_activations(cpu::QuantAct act, const void* blocks, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  if (act == cpu::QuantAct::kQ8_0) {
    const auto* b = static_cast<const cpu::quant::BlockQ8_0*>(blocks);
    for (int64_t i = 0; i < n; ++i) {
      out[size_t(i)] = double(f16_to_f32(b[i / 32].d)) * b[i / 32].qs[i % 32];
    }
  } else {
    const auto* b = static_cast<const cpu::quant::BlockQ8_K*>(blocks);
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(b[i / 256].d) * b[i / 256].qs[i % 256];
  }
  return out;
}

}  // namespace specstack::testing

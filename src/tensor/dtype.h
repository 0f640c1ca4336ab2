// Element types of weights and activations, and scalar conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace specstack {

// The block-quantized types are ggml's block formats (GGUF weights kept as
// stored; the layouts and kernels are in backend/cpu/quant_*). A tensor of
// one is a matrix [rows, cols] whose rows are whole blocks, so only whole
// rows can be sliced or viewed. kQ8_0P is Q8_0 laid out for the CPU's
// VNNI kernels (AVX-512 VNNI, AVX-VNNI) in panels of 16 rows (backend/cpu/quant_panels.h):
// the same bytes per element, but a row is not contiguous, so it is never
// sliced, viewed by rows, written to a file or given to another backend.
// kF8E4M3 (OCP FP8 e4m3fn: bias 7, no infinities, 0x7f / 0xff NaN) is
// storage only: FP8 checkpoints' matrices, dequantized at load
// (model/weights.cpp) with their scales.
enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kI32,
  kF8E4M3,
  kQ8_0,
  kQ4_0,
  kQ5_0,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_0P
};

inline bool dtype_is_quantized(DType dtype) {
  return dtype >= DType::kQ8_0;
}

// Elements per block: 1 for plain types, 32 or 256 for the quantized ones.
inline int64_t dtype_block_elements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0P:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
    default:
      return 1;
  }
}

// Bytes per block (= per element for plain types).
inline size_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kF8E4M3:
      return 1;
    case DType::kQ8_0:
      return 34;  // f16 d, int8 q[32]
    case DType::kQ4_0:
      return 18;  // f16 d, 4-bit q[32]
    case DType::kQ5_0:
      return 22;  // f16 d, high bits u32, 4-bit q[32]
    case DType::kQ4_K:
      return 144;  // f16 d, dmin, 6-bit scales[12], 4-bit q[256]
    case DType::kQ5_K:
      return 176;  // Q4_K + high bits[32]
    case DType::kQ6_K:
      return 210;  // ql[128], qh[64], int8 scales[16], f16 d
    case DType::kQ8_0P:
      return 34;  // per 16-row panel and block: 16 f16 d, then 8 x 16 dwords of q + 128
  }
  return 0;
}

// Bytes of n elements (n a whole number of blocks for quantized types).
inline size_t dtype_bytes(DType dtype, int64_t n) {
  return static_cast<size_t>(n / dtype_block_elements(dtype)) * dtype_block_bytes(dtype);
}

// Bytes per element of a plain type; quantized types have none (use
// dtype_bytes).
inline size_t dtype_size(DType dtype) {
  return dtype_is_quantized(dtype) ? 0 : dtype_block_bytes(dtype);
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
    case DType::kF8E4M3:
      return "f8_e4m3";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
    case DType::kQ8_0P:
      return "q8_0p";
  }
  return "?";
}

// bf16 is the top half of an f32; rounding to nearest even on the way down.
inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &wide, 4);
  return out;
}

inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// e4m3fn to f32, exact: (1 + m / 8) 2^(e - 7), subnormals m / 8 2^-6.
inline float e4m3_to_f32(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7) {
    magnitude = __builtin_nanf("");
  } else if (exponent == 0) {
    magnitude = static_cast<float>(mantissa) * 0x1p-9f;
  } else {
    uint32_t wide =
        static_cast<uint32_t>(exponent - 7 + 127) << 23 | static_cast<uint32_t>(mantissa) << 20;
    std::memcpy(&magnitude, &wide, 4);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

// IEEE half precision, portable (the hot paths use F16C where available).
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace specstack

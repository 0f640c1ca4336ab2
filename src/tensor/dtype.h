// Element types of weights and activations, and scalar conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace specstack {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32 };

inline size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kI32: return 4;
  }
  return 0;
}

inline const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
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

// IEEE half precision, portable (the hot paths use F16C where available).
float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace specstack

// GGML tensor types as GGUF files store them: the type ids, block geometry
// (elements and bytes per block) and which ones specstack can dequantize.
// The ids are the on-disk values of ggml's `enum ggml_type`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace specstack::gguf {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;        // "Q4_K", as llama.cpp prints it
  int64_t block_elements;  // elements per block (1 for plain types)
  int64_t block_bytes;     // bytes per block
  bool dequantizable;      // specstack can turn it into f32
};

// Traits of a raw type id, or nullopt for ids this build does not know
// (the i-quants, removed types, garbage).
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type);
// "Q4_K", or "type 19" for an id without traits.
std::string ggml_type_name(uint32_t type);

}  // namespace specstack::gguf

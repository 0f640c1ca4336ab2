#include "gguf/gguf_types.h"

#include <fmt/format.h>

namespace specstack::gguf {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type) {
  // Block sizes from the format definition (ggml-common.h): e.g. Q4_K is
  // d, dmin (2 x f16) + 12 scale bytes + 128 nibble bytes = 144 per 256.
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return GgmlTypeTraits{"F32", 1, 4, true};
    case GgmlType::kF16:
      return GgmlTypeTraits{"F16", 1, 2, true};
    case GgmlType::kBF16:
      return GgmlTypeTraits{"BF16", 1, 2, true};
    case GgmlType::kQ4_0:
      return GgmlTypeTraits{"Q4_0", 32, 18, true};
    case GgmlType::kQ4_1:
      return GgmlTypeTraits{"Q4_1", 32, 20, true};
    case GgmlType::kQ5_0:
      return GgmlTypeTraits{"Q5_0", 32, 22, true};
    case GgmlType::kQ5_1:
      return GgmlTypeTraits{"Q5_1", 32, 24, true};
    case GgmlType::kQ8_0:
      return GgmlTypeTraits{"Q8_0", 32, 34, true};
    case GgmlType::kQ8_1:
      return GgmlTypeTraits{"Q8_1", 32, 36, false};
    case GgmlType::kQ2_K:
      return GgmlTypeTraits{"Q2_K", 256, 84, false};
    case GgmlType::kQ3_K:
      return GgmlTypeTraits{"Q3_K", 256, 110, false};
    case GgmlType::kQ4_K:
      return GgmlTypeTraits{"Q4_K", 256, 144, true};
    case GgmlType::kQ5_K:
      return GgmlTypeTraits{"Q5_K", 256, 176, true};
    case GgmlType::kQ6_K:
      return GgmlTypeTraits{"Q6_K", 256, 210, true};
    case GgmlType::kQ8_K:
      return GgmlTypeTraits{"Q8_K", 256, 292, false};
    case GgmlType::kI8:
      return GgmlTypeTraits{"I8", 1, 1, false};
    case GgmlType::kI16:
      return GgmlTypeTraits{"I16", 1, 2, false};
    case GgmlType::kI32:
      return GgmlTypeTraits{"I32", 1, 4, false};
    case GgmlType::kI64:
      return GgmlTypeTraits{"I64", 1, 8, false};
    case GgmlType::kF64:
      return GgmlTypeTraits{"F64", 1, 8, false};
  }
  return std::nullopt;
}

std::string ggml_type_name(uint32_t type) {
  if (auto traits = ggml_type_traits(type)) return traits->name;
  return fmt::format("type {}", type);
}

}  // namespace specstack::gguf

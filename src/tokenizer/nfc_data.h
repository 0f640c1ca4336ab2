// Unicode tables for NFC (generated into nfc_data.cpp by nfc_data_gen.py from
// the local Python unicodedata). All arrays are sorted for binary search.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specstack::tok {

struct CccRange {
  char32_t first;
  char32_t last;
  uint8_t ccc;  // canonical combining class of every code point in [first, last]
};

struct Decomposition {
  char32_t code_point;
  uint16_t offset;  // into kDecompositionData
  uint8_t length;   // full (recursive) canonical decomposition
};

struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;  // primary composite of (first, second)
};

extern const CccRange kCccRanges[];
extern const size_t kCccRanges_size;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositions_size;
extern const char32_t kDecompositionData[];
extern const size_t kDecompositionData_size;
extern const Composition kCompositions[];
extern const size_t kCompositions_size;

}  // namespace specstack::tok

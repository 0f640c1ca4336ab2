// Metadata values of a GGUF file: the 13 GGUF value types, scalars and
// (possibly nested) arrays, with typed accessors that name the key and the
// stored type when a caller asks for something else.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace specstack::gguf {

// On-disk ids of gguf_type.
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

const char* value_type_name(ValueType type);
bool is_integer(ValueType type);
bool is_float(ValueType type);

struct Value;

// An array holds one element type; only the matching vector is filled.
// Integers (and bools, as 0/1) are widened to int64; a uint64 above INT64_MAX
// keeps its bit pattern (no GGUF key the loader reads can hold one).
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  std::vector<Value> arrays;  // nested arrays
  size_t size() const;
};

struct Value {
  ValueType type = ValueType::kUint8;
  int64_t i = 0;                       // integer types and bool
  double f = 0;                        // float types
  std::string s;                       // kString
  std::shared_ptr<const Array> array;  // kArray
};

}  // namespace specstack::gguf

#include "gguf/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <unordered_set>

namespace specstack::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // nested arrays: no real file nests at all
constexpr uint64_t kMaxAlignment = 1u << 20;

// A bounds-checked little-endian reader over the file bytes. Every read
// checks the bytes left; errors carry the offset where the field starts.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <typename T>
  Result<T> read(const char* what) {
    if (left() < sizeof(T)) return truncated(what);
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  Result<std::string> read_string(const char* what) {
    const uint64_t at = pos_;
    SS_ASSIGN_OR_RETURN(uint64_t length, read<uint64_t>(what));
    if (length > left()) {
      return errorf("gguf: {} at byte {} has length {} but only {} bytes follow", what, at, length,
                    left());
    }
    std::string out(bytes_.substr(pos_, length));
    pos_ += length;
    return out;
  }

  Error truncated(const char* what) const {
    return errorf("gguf: file truncated reading {} at byte {}", what, pos_);
  }

 private:
  std::string_view bytes_;
  uint64_t pos_ = 0;
};

// Smallest encoded size of one element of `type`, to bound counts before
// allocating (a string is at least its 8-byte length, an array 12 bytes).
uint64_t min_encoded_size(ValueType type) {
  switch (type) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
    case ValueType::kString:
      return 8;
    case ValueType::kArray:
      return 12;
  }
  return 1;
}

Result<ValueType> read_value_type(Cursor& in, const char* what) {
  const uint64_t at = in.pos();
  SS_ASSIGN_OR_RETURN(uint32_t raw, in.read<uint32_t>(what));
  if (raw > static_cast<uint32_t>(ValueType::kFloat64)) {
    return errorf("gguf: unknown value type {} at byte {}", raw, at);
  }
  return static_cast<ValueType>(raw);
}

template <typename T>
Result<int64_t> read_int_as(Cursor& in, const char* what) {
  SS_ASSIGN_OR_RETURN(T raw, in.read<T>(what));
  return static_cast<int64_t>(raw);
}

Result<int64_t> read_int(Cursor& in, ValueType type) {
  switch (type) {
    case ValueType::kUint8:
      return read_int_as<uint8_t>(in, "uint8");
    case ValueType::kInt8:
      return read_int_as<int8_t>(in, "int8");
    case ValueType::kUint16:
      return read_int_as<uint16_t>(in, "uint16");
    case ValueType::kInt16:
      return read_int_as<int16_t>(in, "int16");
    case ValueType::kUint32:
      return read_int_as<uint32_t>(in, "uint32");
    case ValueType::kInt32:
      return read_int_as<int32_t>(in, "int32");
    case ValueType::kUint64:
      return read_int_as<uint64_t>(in, "uint64");
    case ValueType::kInt64:
      return read_int_as<int64_t>(in, "int64");
    default:
      return make_error("gguf: internal: read_int on a non-integer");
  }
}

// Reads one scalar of `type` into value (type must not be kArray).
Status read_scalar(Cursor& in, ValueType type, Value& value) {
  value.type = type;
  if (is_integer(type)) {
    SS_ASSIGN_OR_RETURN(value.i, read_int(in, type));
  } else if (type == ValueType::kBool) {
    const uint64_t at = in.pos();
    SS_ASSIGN_OR_RETURN(uint8_t raw, in.read<uint8_t>("bool"));
    if (raw > 1) return errorf("gguf: bool at byte {} is {}, not 0 or 1", at, raw);
    value.i = raw;
  } else if (type == ValueType::kFloat32) {
    SS_ASSIGN_OR_RETURN(float raw, in.read<float>("float32"));
    value.f = raw;
  } else if (type == ValueType::kFloat64) {
    SS_ASSIGN_OR_RETURN(value.f, in.read<double>("float64"));
  } else if (type == ValueType::kString) {
    SS_ASSIGN_OR_RETURN(value.s, in.read_string("string"));
  } else {
    return make_error("gguf: internal: read_scalar on an array");
  }
  return {};
}

Result<std::shared_ptr<const Array>> read_array(Cursor& in, int depth) {
  if (depth > kMaxArrayDepth) {
    return errorf("gguf: arrays nested deeper than {} at byte {}", kMaxArrayDepth, in.pos());
  }
  auto array = std::make_shared<Array>();
  SS_ASSIGN_OR_RETURN(array->elem_type, read_value_type(in, "array element type"));
  const uint64_t count_at = in.pos();
  SS_ASSIGN_OR_RETURN(uint64_t count, in.read<uint64_t>("array length"));
  // Bound the count by the bytes left before reserving anything.
  if (count > in.left() / min_encoded_size(array->elem_type)) {
    return errorf("gguf: array of {} {} at byte {} does not fit in the {} bytes left", count,
                  value_type_name(array->elem_type), count_at, in.left());
  }
  const ValueType elem = array->elem_type;
  if (elem == ValueType::kArray) {
    array->arrays.reserve(count);
    for (uint64_t k = 0; k < count; ++k) {
      Value item;
      item.type = ValueType::kArray;
      SS_ASSIGN_OR_RETURN(item.array, read_array(in, depth + 1));
      array->arrays.push_back(std::move(item));
    }
    return std::shared_ptr<const Array>(std::move(array));
  }
  if (elem == ValueType::kString) {
    array->strings.reserve(count);
  } else if (is_float(elem)) {
    array->floats.reserve(count);
  } else {
    array->ints.reserve(count);
  }
  Value item;
  for (uint64_t k = 0; k < count; ++k) {
    SS_TRY(read_scalar(in, elem, item));
    if (elem == ValueType::kString) {
      array->strings.push_back(std::move(item.s));
    } else if (is_float(elem)) {
      array->floats.push_back(item.f);
    } else {
      array->ints.push_back(item.i);
    }
  }
  return std::shared_ptr<const Array>(std::move(array));
}

Result<Value> read_value(Cursor& in) {
  Value value;
  SS_ASSIGN_OR_RETURN(value.type, read_value_type(in, "value type"));
  if (value.type == ValueType::kArray) {
    SS_ASSIGN_OR_RETURN(value.array, read_array(in, 1));
  } else {
    SS_TRY(read_scalar(in, value.type, value));
  }
  return value;
}

struct Preamble {
  Header header;
  uint64_t n_tensors = 0;
};

// Magic, version, counts and the metadata key/value pairs.
Result<Preamble> read_preamble(Cursor& in) {
  Preamble out;
  Header& header = out.header;
  SS_ASSIGN_OR_RETURN(uint32_t magic, in.read<uint32_t>("magic"));
  if (magic != kMagic) return make_error("gguf: not a GGUF file (bad magic)");
  SS_ASSIGN_OR_RETURN(header.version, in.read<uint32_t>("version"));
  if (header.version == 1) {
    return make_error("gguf: version 1 files (32-bit counts) are not supported; re-convert it");
  }
  if (header.version != 2 && header.version != 3) {
    // A big-endian file reads its version byte-swapped (3 -> 0x03000000).
    if ((header.version & 0xffff) == 0 && header.version != 0) {
      return make_error("gguf: big-endian files are not supported");
    }
    return errorf("gguf: unsupported version {} (expected 2 or 3)", header.version);
  }
  SS_ASSIGN_OR_RETURN(out.n_tensors, in.read<uint64_t>("tensor count"));
  const uint64_t kv_at = in.pos();
  SS_ASSIGN_OR_RETURN(uint64_t n_kv, in.read<uint64_t>("metadata count"));
  // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes.
  if (n_kv > in.left() / 13) {
    return errorf("gguf: metadata count {} at byte {} does not fit in the file", n_kv, kv_at);
  }
  std::unordered_set<std::string> keys;
  header.metadata.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = in.pos();
    SS_ASSIGN_OR_RETURN(std::string key, in.read_string("metadata key"));
    if (!keys.insert(key).second) return errorf("gguf: duplicate metadata key '{}'", key);
    auto value = read_value(in);
    if (!value.ok()) return errorf("{} (metadata key '{}' at byte {})", value.message(), key, at);
    header.metadata.emplace_back(std::move(key), std::move(value).value());
  }
  if (const Value* align = header.find("general.alignment")) {
    if (align->type != ValueType::kUint32) {
      return errorf("gguf: general.alignment is {}, expected uint32", value_type_name(align->type));
    }
    const uint64_t a = static_cast<uint64_t>(align->i);
    if (a == 0 || (a & (a - 1)) != 0 || a > kMaxAlignment) {
      return errorf("gguf: general.alignment {} is not a power of two up to {}", a, kMaxAlignment);
    }
    header.alignment = a;
  }
  return out;
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t& out) {
  return __builtin_mul_overflow(a, b, &out);
}

Result<TensorInfo> read_tensor_info(Cursor& in) {
  TensorInfo info;
  const uint64_t at = in.pos();
  SS_ASSIGN_OR_RETURN(info.name, in.read_string("tensor name"));
  SS_ASSIGN_OR_RETURN(uint32_t n_dims, in.read<uint32_t>("tensor dimension count"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return errorf("gguf: tensor '{}' (byte {}) has {} dimensions, expected 1 to {}", info.name, at,
                  n_dims, kMaxDims);
  }
  uint64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    SS_ASSIGN_OR_RETURN(uint64_t dim, in.read<uint64_t>("tensor dimension"));
    if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        mul_overflows(numel, dim, numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return errorf("gguf: tensor '{}' has an invalid or overflowing dimension {}", info.name, dim);
    }
    info.dims.push_back(static_cast<int64_t>(dim));
  }
  SS_ASSIGN_OR_RETURN(info.type, in.read<uint32_t>("tensor type"));
  SS_ASSIGN_OR_RETURN(info.offset, in.read<uint64_t>("tensor offset"));
  const auto traits = ggml_type_traits(info.type);
  if (!traits) {
    return errorf("gguf: tensor '{}' has unknown tensor type {}", info.name, info.type);
  }
  const uint64_t row = static_cast<uint64_t>(info.dims[0]);
  if (row % static_cast<uint64_t>(traits->block_elements) != 0) {
    return errorf("gguf: tensor '{}' of type {} has rows of {} elements, not a multiple of {}",
                  info.name, traits->name, row, traits->block_elements);
  }
  const uint64_t blocks = numel / static_cast<uint64_t>(traits->block_elements);
  if (mul_overflows(blocks, static_cast<uint64_t>(traits->block_bytes), info.nbytes)) {
    return errorf("gguf: tensor '{}' byte size overflows", info.name);
  }
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> TensorInfo::shape() const {
  return {dims.rbegin(), dims.rend()};
}

Result<Header> parse_gguf_metadata(std::string_view file) {
  Cursor in(file);
  SS_ASSIGN_OR_RETURN(Preamble preamble, read_preamble(in));
  return std::move(preamble.header);
}

Result<Header> parse_gguf(std::string_view file) {
  Cursor in(file);
  SS_ASSIGN_OR_RETURN(Preamble preamble, read_preamble(in));
  Header header = std::move(preamble.header);
  // A tensor info takes at least 8 (name) + 4 + 8 (one dim) + 4 + 8 bytes.
  if (preamble.n_tensors > in.left() / 32) {
    return errorf("gguf: tensor count {} does not fit in the file", preamble.n_tensors);
  }
  header.tensors.reserve(preamble.n_tensors);
  for (uint64_t t = 0; t < preamble.n_tensors; ++t) {
    SS_ASSIGN_OR_RETURN(TensorInfo info, read_tensor_info(in));
    if (!header.tensor_index.emplace(info.name, header.tensors.size()).second) {
      return errorf("gguf: duplicate tensor name '{}'", info.name);
    }
    header.tensors.push_back(std::move(info));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t a = header.alignment;
  header.data_offset = (in.pos() + a - 1) / a * a;
  if (header.data_offset > file.size() && !header.tensors.empty()) {
    return errorf("gguf: data section (byte {}) starts past the end of the {}-byte file",
                  header.data_offset, file.size());
  }
  const uint64_t data_size =
      header.data_offset > file.size() ? 0 : file.size() - header.data_offset;
  std::vector<std::pair<uint64_t, const TensorInfo*>> ranges;
  for (const TensorInfo& info : header.tensors) {
    if (info.offset % a != 0) {
      return errorf("gguf: tensor '{}' offset {} is not a multiple of the alignment {}", info.name,
                    info.offset, a);
    }
    if (info.offset > data_size || info.nbytes > data_size - info.offset) {
      return errorf("gguf: tensor '{}' ({} bytes at offset {}) runs past the end of the file",
                    info.name, info.nbytes, info.offset);
    }
    ranges.emplace_back(info.offset, &info);
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  for (size_t k = 1; k < ranges.size(); ++k) {
    const TensorInfo& prev = *ranges[k - 1].second;
    if (prev.offset + prev.nbytes > ranges[k].first) {
      return errorf("gguf: tensors '{}' and '{}' overlap", prev.name, ranges[k].second->name);
    }
  }
  return header;
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  GgufFile out;
  SS_ASSIGN_OR_RETURN(out.file_, MappedFile::open(path));
  auto header = parse_gguf(out.file_->bytes());
  if (!header.ok()) return errorf("{}: {}", path, header.message());
  out.header_ = std::move(header).value();
  return out;
}

const uint8_t* GgufFile::tensor_data(const TensorInfo& info) const {
  return file_->data() + header_.data_offset + info.offset;
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace specstack::gguf

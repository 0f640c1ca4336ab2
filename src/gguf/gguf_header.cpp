// Header lookups: typed metadata reads that name the key (and the stored
// type on a mismatch), and tensors by name.
#include "gguf/gguf_file.h"

namespace specstack::gguf {

const Value* Header::find(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

Error missing_key(std::string_view key) {
  return errorf("gguf: missing metadata key '{}'", key);
}
Error wrong_type(std::string_view key, const Value& v, const char* expected) {
  return errorf("gguf: metadata key '{}' is {}, expected {}", key, value_type_name(v.type),
                expected);
}
}  // namespace

Result<int64_t> Header::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing_key(key);
  if (!is_integer(v->type)) return wrong_type(key, *v, "an integer");
  if (v->type == ValueType::kUint64 && v->i < 0) {
    return errorf("gguf: metadata key '{}' is out of range", key);
  }
  return v->i;
}

Result<double> Header::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing_key(key);
  if (is_float(v->type)) return v->f;
  if (is_integer(v->type)) return static_cast<double>(v->i);
  return wrong_type(key, *v, "a number");
}

Result<bool> Header::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing_key(key);
  if (v->type != ValueType::kBool) return wrong_type(key, *v, "a bool");
  return v->i != 0;
}

Result<std::string> Header::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing_key(key);
  if (v->type != ValueType::kString) return wrong_type(key, *v, "a string");
  return v->s;
}

Result<const Array*> Header::get_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing_key(key);
  if (v->type != ValueType::kArray) return wrong_type(key, *v, "an array");
  return v->array.get();
}

const TensorInfo* Header::find_tensor(std::string_view name) const {
  auto it = tensor_index.find(std::string(name));
  return it == tensor_index.end() ? nullptr : &tensors[it->second];
}

}  // namespace specstack::gguf

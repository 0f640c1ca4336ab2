// GgufBuilder: writes GGUF bytes for tests (well-formed files with chosen
// metadata and tensors, and the pieces to break them with). Follows the
// format as llama.cpp's gguf-py writes it: header, key/values, tensor infos,
// data section at the alignment.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace specstack::testing {

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& u8(const std::string& key, uint8_t v) { return scalar(key, 0, v); }
  GgufBuilder& i8(const std::string& key, int8_t v) { return scalar(key, 1, v); }
  GgufBuilder& u16(const std::string& key, uint16_t v) { return scalar(key, 2, v); }
  GgufBuilder& i16(const std::string& key, int16_t v) { return scalar(key, 3, v); }
  GgufBuilder& u32(const std::string& key, uint32_t v) { return scalar(key, 4, v); }
  GgufBuilder& i32(const std::string& key, int32_t v) { return scalar(key, 5, v); }
  GgufBuilder& f32(const std::string& key, float v) { return scalar(key, 6, v); }
  GgufBuilder& boolean(const std::string& key, bool v) { return scalar(key, 7, uint8_t(v)); }
  GgufBuilder& u64(const std::string& key, uint64_t v) { return scalar(key, 10, v); }
  GgufBuilder& i64(const std::string& key, int64_t v) { return scalar(key, 11, v); }
  GgufBuilder& f64(const std::string& key, double v) { return scalar(key, 12, v); }
  GgufBuilder& str(const std::string& key, const std::string& v) {
    begin_kv(key, 8);
    put_string(kv_, v);
    return *this;
  }
  GgufBuilder& strings(const std::string& key, const std::vector<std::string>& v) {
    begin_kv(key, 9);
    put(kv_, uint32_t{8});
    put(kv_, uint64_t(v.size()));
    for (const auto& s : v) put_string(kv_, s);
    return *this;
  }
  template <typename T>
  GgufBuilder& numbers(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    begin_kv(key, 9);
    put(kv_, elem_type);
    put(kv_, uint64_t(v.size()));
    for (const T& x : v) put(kv_, x);
    return *this;
  }
  // Raw bytes appended to the key/value section (for malformed files).
  GgufBuilder& raw_kv(const std::string& bytes, uint64_t counts_as = 1) {
    kv_ += bytes;
    n_kv_ += counts_as;
    return *this;
  }

  // dims in GGUF order (dims[0] = row length); offset -1 = next aligned spot.
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                      const std::string& data, int64_t offset = -1) {
    tensors_.push_back({name, std::move(dims), type, data, offset});
    return *this;
  }
  GgufBuilder& alignment(uint32_t a) {
    alignment_ = a;
    return u32("general.alignment", a);
  }

  std::string build() const {
    std::string out;
    out += "GGUF";
    put(out, version_);
    put(out, uint64_t(tensors_.size()));
    put(out, n_kv_);
    out += kv_;
    std::string data;
    for (const Tensor& t : tensors_) {
      uint64_t offset = t.offset;
      if (t.offset < 0) {
        while (data.size() % alignment_ != 0) data.push_back('\0');
        offset = data.size();
        data += t.data;
      }
      put_string(out, t.name);
      put(out, uint32_t(t.dims.size()));
      for (uint64_t d : t.dims) put(out, d);
      put(out, t.type);
      put(out, offset);
    }
    while (out.size() % alignment_ != 0) out.push_back('\0');
    return out + data;
  }

  template <typename T>
  static void put(std::string& out, T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));
    out.append(bytes, sizeof(T));
  }
  static void put_string(std::string& out, const std::string& s) {
    put(out, uint64_t(s.size()));
    out += s;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::string data;
    int64_t offset;
  };
  void begin_kv(const std::string& key, uint32_t type) {
    put_string(kv_, key);
    put(kv_, type);
    ++n_kv_;
  }
  template <typename T>
  GgufBuilder& scalar(const std::string& key, uint32_t type, T v) {
    begin_kv(key, type);
    put(kv_, v);
    return *this;
  }

  uint32_t version_;
  uint64_t n_kv_ = 0;
  std::string kv_;
  std::vector<Tensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace specstack::testing

#include "gguf/gguf_dequant.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/load_shares.h"

namespace specstack::gguf {
namespace {

constexpr const char* kSupportedTypes =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

float load_f16(const uint8_t* p) {
  return f16_to_f32(load_u16(p));
}

// block_q8_0: d (f16), qs[32] (int8). y = d * q.
void dequant_q8_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const auto* qs = reinterpret_cast<const int8_t*>(block + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// block_q4_0: d (f16), qs[16]: element j in the low nibble of qs[j], element
// j + 16 in the high nibble; y = (nibble - 8) * d.
void dequant_q4_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const uint8_t* qs = block + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// block_q4_1: d, m (f16), qs[16]; nibbles as in Q4_0, y = nibble * d + m.
void dequant_q4_1(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  const uint8_t* qs = block + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// block_q5_0: d (f16), qh (32 fifth bits, u32), qs[16]; y = (q5 - 16) * d.
void dequant_q5_0(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  uint32_t qh;
  std::memcpy(&qh, block + 2, 4);
  const uint8_t* qs = block + 6;
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
    const uint8_t xh1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
    y[j] = static_cast<float>(((qs[j] & 0x0F) | xh0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | xh1) - 16) * d;
  }
}

// block_q5_1: d, m (f16), qh (u32), qs[16]; y = q5 * d + m.
void dequant_q5_1(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float m = load_f16(block + 2);
  uint32_t qh;
  std::memcpy(&qh, block + 4, 4);
  const uint8_t* qs = block + 8;
  for (int j = 0; j < 16; ++j) {
    const uint8_t xh0 = static_cast<uint8_t>(((qh >> (j + 0)) << 4) & 0x10);
    const uint8_t xh1 = static_cast<uint8_t>(((qh >> (j + 12))) & 0x10);
    y[j] = static_cast<float>((qs[j] & 0x0F) | xh0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | xh1) * d + m;
  }
}

// block_q4_K: d, dmin (f16), scales[12], qs[128]. Eight sub-blocks of 32;
// each 64 elements share 32 bytes (low nibbles first, then high).
void dequant_q4_k(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* q = block + 16;
  int is = 0;
  for (int j = 0; j < 256; j += 64) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    is += 2;
  }
}

// block_q5_K: d, dmin (f16), scales[12], qh[32], qs[128]: Q4_K plus a fifth
// bit per element from qh (bit 2i / 2i+1 for the i-th group of 64).
void dequant_q5_k(const uint8_t* block, float* y) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  const uint8_t* scales = block + 4;
  const uint8_t* qh = block + 16;
  const uint8_t* ql = block + 48;
  int is = 0;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < 256; j += 64) {
    int sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
    ql += 32;
    is += 2;
    u1 <<= 2;
    u2 <<= 2;
  }
}

// block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16]
// (int8, one per 16 elements), d (f16); y = d * scale * (q - 32).
void dequant_q6_k(const uint8_t* block, float* y) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  for (int n = 0; n < 256; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

using BlockFn = void (*)(const uint8_t*, float*);

BlockFn block_fn(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
      return dequant_q8_0;
    case GgmlType::kQ4_0:
      return dequant_q4_0;
    case GgmlType::kQ4_1:
      return dequant_q4_1;
    case GgmlType::kQ5_0:
      return dequant_q5_0;
    case GgmlType::kQ5_1:
      return dequant_q5_1;
    case GgmlType::kQ4_K:
      return dequant_q4_k;
    case GgmlType::kQ5_K:
      return dequant_q5_k;
    case GgmlType::kQ6_K:
      return dequant_q6_k;
    default:
      return nullptr;
  }
}

}  // namespace

// The 6-bit scale and min of sub-block j packed into the 12 scale bytes of
// Q4_K / Q5_K (ggml's get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, int& scale, int& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
    min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

Status dequantize(uint32_t type, const uint8_t* src, int64_t n, float* dst) {
  const auto traits = ggml_type_traits(type);
  if (!traits || !traits->dequantizable) {
    return errorf("gguf: tensor type {} is not supported (supported: {})", ggml_type_name(type),
                  kSupportedTypes);
  }
  if (n % traits->block_elements != 0) {
    return errorf("gguf: {} elements are not whole {} blocks", n, traits->name);
  }
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return {};
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_f16(src + 2 * i);
      return {};
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      return {};
    default:
      break;
  }
  const BlockFn fn = block_fn(static_cast<GgmlType>(type));
  const int64_t blocks = n / traits->block_elements;
  for (int64_t b = 0; b < blocks; ++b) {
    fn(src + b * traits->block_bytes, dst + b * traits->block_elements);
  }
  return {};
}

Status dequantize_rows(uint32_t type, const uint8_t* src, int64_t rows, int64_t row, float* dst) {
  const auto traits = ggml_type_traits(type);
  if (!traits || !traits->dequantizable || row % traits->block_elements != 0) {
    return dequantize(type, src, row, dst);  // the same error, named
  }
  const int64_t row_bytes = row / traits->block_elements * traits->block_bytes;
  // Rows split over threads for the large matrices (a 1B model is ~1e9
  // elements); each row is whole blocks, so the split never cuts a block.
  const int64_t shares = load_share_count(rows * row);
  std::vector<Status> results(static_cast<size_t>(shares));
  run_load_shares(rows, shares, [&](int64_t share, int64_t begin, int64_t end) {
    if (begin < end) {
      results[static_cast<size_t>(share)] =
          dequantize(type, src + begin * row_bytes, (end - begin) * row, dst + begin * row);
    }
  });
  for (const Status& s : results) {
    if (!s.ok()) return s.error();
  }
  return {};
}

Status check_dequantizable(const TensorInfo& info) {
  const auto traits = ggml_type_traits(info.type);
  if (!traits || !traits->dequantizable) {
    return errorf("gguf: tensor '{}' has type {}, which specstack cannot load (supported: {})",
                  info.name, ggml_type_name(info.type), kSupportedTypes);
  }
  return {};
}

Result<Tensor> dequantize_tensor(const GgufFile& file, const TensorInfo& info) {
  SS_TRY(check_dequantizable(info));
  Tensor out = Tensor::zeros(DType::kF32, info.shape());
  const int64_t row = info.dims[0];
  SS_TRY(dequantize_rows(info.type, file.tensor_data(info), info.numel() / row, row, out.f32()));
  return out;
}

}  // namespace specstack::gguf

#include "backend/cpu/kv_rows.h"

#include <cstring>
#include <string>

#include "backend/cpu/quant_kernels.h"
#include "base/check.h"

namespace specstack::cpu {
namespace {

void load_f32(const void* row, int64_t n, float* out) {
  std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
}
void store_f32(const float* in, int64_t n, void* row) {
  std::memcpy(row, in, static_cast<size_t>(n) * sizeof(float));
}

void load_bf16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(bits[i]);
}
void store_bf16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_bf16(in[i]);
}

void load_f16(const void* row, int64_t n, float* out) {
  const auto* bits = static_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(bits[i]);
}
void store_f16(const float* in, int64_t n, void* row) {
  auto* bits = static_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) bits[i] = f32_to_f16(in[i]);
}

}  // namespace

KvRowCodec kv_row_codec(DType dtype, Isa isa) {
  SS_CHECK_MSG(quant_isa_available(isa),
               std::string("KV rows: isa not available here: ") + isa_name(isa));
  const bool avx2 = isa == Isa::kAvx2;
#if SS_QUANT_AVX2
#define SS_PICK(fn) (avx2 ? kv_avx2::fn : fn)
#else
#define SS_PICK(fn) ((void)avx2, fn)
#endif
  switch (dtype) {
    case DType::kF32:
      return {load_f32, store_f32};
    case DType::kBF16:
      return {SS_PICK(load_bf16), SS_PICK(store_bf16)};
    case DType::kF16:
      return {SS_PICK(load_f16), SS_PICK(store_f16)};
    default:
      SS_CHECK_MSG(false, std::string("KV rows: no codec for ") + dtype_name(dtype));
  }
#undef SS_PICK
  return {};
}

KvRowCodec kv_row_codec(DType dtype) {
  return kv_row_codec(dtype, quant_best_isa());
}

}  // namespace specstack::cpu

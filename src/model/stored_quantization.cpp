#include "model/stored_quantization.h"

#include <fmt/format.h>

#include "base/load_shares.h"

namespace specstack {
namespace {

using json = nlohmann::json;

std::string short_text(const json& value) {
  std::string text = value.is_string() ? value.get<std::string>() : value.dump();
  std::string out;
  for (char c : text.substr(0, 40)) out += (c >= 32 && c < 127) ? c : '?';
  return text.size() > 40 ? out + "..." : out;
}

std::string string_field(const json& object, const char* name) {
  auto it = object.find(name);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// One compressed-tensors config group: 8-bit float weights, one scale per
// output row or per matrix, computed ahead (not dynamic).
Status check_group(const std::string& name, const json& group, const std::string& where) {
  const std::string who =
      fmt::format("{}: quantization_config group '{}'", where, short_text(name));
  if (!group.is_object()) return errorf("{} must be an object", who);
  auto weights = group.find("weights");
  if (weights == group.end() || !weights->is_object())
    return errorf("{}: no 'weights' scheme", who);
  const std::string type = string_field(*weights, "type");
  const auto bits = weights->find("num_bits");
  if (type != "float" || bits == weights->end() || !bits->is_number_integer() ||
      bits->get<int64_t>() != 8) {
    return errorf(
        "{}: weights of type '{}' with {} bits are not supported (only 8-bit float, FP8 e4m3)", who,
        short_text(type), bits == weights->end() ? "no" : short_text(*bits));
  }
  const std::string strategy = string_field(*weights, "strategy");
  if (strategy != "channel" && strategy != "tensor") {
    return errorf(
        "{}: weight strategy '{}' is not supported (per 'channel' or per 'tensor' scales only)",
        who, short_text(strategy));
  }
  if (auto dynamic = weights->find("dynamic");
      dynamic != weights->end() && dynamic->is_boolean() && dynamic->get<bool>()) {
    return errorf("{}: dynamic weight scales are not supported", who);
  }
  return Status();
}

Status check_compressed_tensors(const json& q, const std::string& where) {
  const std::string format = string_field(q, "format");
  if (format != "float-quantized") {
    return errorf(
        "{}: compressed-tensors format '{}' is not supported (only 'float-quantized', FP8 e4m3 "
        "weights)",
        where, short_text(format));
  }
  if (auto kv = q.find("kv_cache_scheme"); kv != q.end() && !kv->is_null()) {
    return errorf("{}: an FP8 KV cache (kv_cache_scheme) is not supported", where);
  }
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return errorf("{}: compressed-tensors without config_groups", where);
  }
  for (const auto& [name, group] : groups->items()) SS_TRY(check_group(name, group, where));
  return Status();
}

}  // namespace

Result<std::string> parse_stored_quantization(const json& q, const std::string& where) {
  if (!q.is_object()) return errorf("{}: quantization_config must be an object", where);
  const std::string method = string_field(q, "quant_method");
  if (method == "compressed-tensors") {
    SS_TRY(check_compressed_tensors(q, where));
    return method;
  }
  if (method == "fbgemm_fp8") return method;
  return errorf(
      "{}: checkpoints stored quantized with quant_method '{}' are not supported (FP8 "
      "compressed-tensors and fbgemm_fp8 are); load the bf16/f16 checkpoint instead (with "
      "--device cuda, --quantization fp8 quantizes it at load)",
      where, method.empty() ? std::string("unknown") : short_text(method));
}

Result<Tensor> dequantize_e4m3_matrix(const std::string& name, const Tensor& q,
                                      const Tensor& scale) {
  if (q.dtype() != DType::kF8E4M3 || q.dim() != 2) {
    return errorf("weights: tensor '{}' is F8_E4M3 but not a matrix", name);
  }
  const int64_t rows = q.size(0), cols = q.size(1);
  if (scale.dtype() != DType::kF32 || (scale.numel() != rows && scale.numel() != 1)) {
    return errorf(
        "weights: the scale of '{}' has shape {}: one scale per output row ({}) or one per matrix "
        "is supported, not block-wise scales",
        name, scale.shape_string(), rows);
  }
  Tensor out = Tensor::zeros(DType::kBF16, q.shape());
  const uint8_t* src = q.data<uint8_t>();
  uint16_t* dst = out.data<uint16_t>();
  const float* s = scale.f32();
  const bool per_row = scale.numel() == rows;
  auto convert_rows = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float row_scale = s[per_row ? r : 0];
      for (int64_t c = 0; c < cols; ++c) {
        dst[r * cols + c] = f32_to_bf16(e4m3_to_f32(src[r * cols + c]) * row_scale);
      }
    }
  };
  // A 70B checkpoint holds ~7e10 of them: spread the rows over the cores.
  run_load_shares(rows, load_share_count(rows * cols),
                  [&](int64_t, int64_t begin, int64_t end) { convert_rows(begin, end); });
  return out;
}

}  // namespace specstack

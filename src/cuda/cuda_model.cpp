// CudaModel construction: device selection, weight upload into the fused
// layout, scratch sizing. The forward pass is in cuda_forward.cpp, decode
// graphs in cuda_graphs.cpp, device scoring in cuda_score.cpp.
#include "cuda/cuda_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "cuda/cuda_model_internal.h"
#include "cuda/elementwise.h"
#include "cuda/fp8_quantize.h"

namespace specstack::cuda {

namespace {

// Source dtype code for convert_to_bf16.
int dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0;
    case DType::kBF16:
      return 1;
    case DType::kF16:
      return 2;
    default:
      return -1;
  }
}

}  // namespace

CudaModel::CudaModel(ModelConfig config, const CudaModelOptions& options)
    : config_(std::move(config)), options_(options), meta_(std::make_unique<StepMeta>()) {
  tail_rows_only_ = last_layer_for_logit_rows_only();  // StepMeta::tail_rows_only allowed
  const char* follow = std::getenv("SPECSTACK_FOLLOW_GRAPHS");
  follow_graphs_ = follow == nullptr ? kFollowGraphsDefault : std::string_view(follow) != "0";
  const char* fp8_attention = std::getenv("SPECSTACK_FP8_ATTENTION");
  if (fp8_attention != nullptr && std::string_view(fp8_attention) == "0") {
    options_.fp8_attention = false;
  }
  fp8_attention_all_ = fp8_attention != nullptr && std::string_view(fp8_attention) == "all";
}

CudaModel::~CudaModel() {
  graphs_.clear();
  capture_graphs_.clear();
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
  if (logits_host_ != nullptr) cudaFreeHost(logits_host_);
  if (capture_host_ != nullptr) cudaFreeHost(capture_host_);
  if (pick_host_ != nullptr) cudaFreeHost(pick_host_);
  if (follow_host_ != nullptr) cudaFreeHost(follow_host_);
  if (score_host_ != nullptr) cudaFreeHost(score_host_);
  if (logprobs_host_ != nullptr) cudaFreeHost(logprobs_host_);
  if (verify_host_ != nullptr) cudaFreeHost(verify_host_);
  gemm_.reset();
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

template <typename T>
T* CudaModel::alloc(size_t count) {
  allocations_.emplace_back(count * sizeof(T));
  weight_bytes_ += count * sizeof(T);
  return reinterpret_cast<T*>(allocations_.back().data());
}

Result<std::unique_ptr<CudaModel>> CudaModel::create(ModelConfig config, ModelWeights weights,
                                                     const CudaModelOptions& options) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    return errorf("--device cuda: no usable CUDA device ({})",
                  error == cudaSuccess ? "none found" : cuda_error_message(error));
  }
  if (options.device_index < 0 || options.device_index >= count) {
    return errorf("--device cuda: device {} does not exist ({} found)", options.device_index,
                  count);
  }
  SS_CUDA_CHECK(cudaSetDevice(options.device_index));
  if (config.head_dim % 2 != 0 || config.head_dim > 256) {
    return errorf("--device cuda: head_dim {} is not supported (even, at most 256)",
                  config.head_dim);
  }
  std::unique_ptr<CudaModel> model(new CudaModel(std::move(config), options));
  SS_CUDA_CHECK(cudaStreamCreateWithFlags(&model->stream_, cudaStreamNonBlocking));
  model->gemm_ = std::make_unique<Gemm>(model->stream_);
  SS_TRY(model->load(std::move(weights)));
  model->setup_one_launch();
  model->ensure_scratch(options.max_tokens_per_step);
  SS_CUDA_CHECK(cudaStreamSynchronize(model->stream_));
  return model;
}

Status CudaModel::load(ModelWeights weights) {
  const ModelConfig& c = config_;
  const int64_t hidden = c.hidden_size;
  const int64_t q_width = c.n_heads * c.head_dim;
  const int64_t kv_width = c.n_kv_heads * c.head_dim;
  DeviceBuffer<uint8_t> staging;  // host dtype -> device before conversion

  // Copies a [rows, cols] matrix (host or device, f32/bf16/f16) into dst and
  // releases the source tensor.
  auto put_matrix = [&](Tensor& src, bf16* dst) -> Status {
    const int code = dtype_code(src.dtype());
    if (code < 0) return make_error("weights: a matrix is not floating point");
    const int64_t n = src.numel();
    if (src.device() == Device::kCuda) {
      if (src.dtype() != DType::kBF16) return make_error("weights: device matrices must be bf16");
      SS_CUDA_CHECK(
          cudaMemcpyAsync(dst, src.raw(), n * sizeof(bf16), cudaMemcpyDeviceToDevice, stream_));
    } else if (src.dtype() == DType::kBF16) {
      SS_CUDA_CHECK(
          cudaMemcpyAsync(dst, src.raw(), n * sizeof(bf16), cudaMemcpyHostToDevice, stream_));
    } else {
      staging.reserve(src.nbytes());
      SS_CUDA_CHECK(cudaMemcpyAsync(staging.data(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice,
                                    stream_));
      convert_to_bf16(staging.data(), code, n, dst, stream_);
    }
    // The source may be device memory freed with the tensor: finish first.
    SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    src = Tensor();
    return Status();
  };
  // A linear weight made of row blocks `parts` (fused q|k|v, gate|up), each
  // [rows_i, in]. bf16, or with fp8_weights each part staged as bf16 on the
  // device (one part at a time, never the whole model) and quantized per row
  // into the fused e4m3 matrix and its scales.
  DeviceBuffer<bf16> fp8_staging;
  auto put_linear = [&](std::initializer_list<Tensor*> parts, int64_t in) -> Result<LinearWeight> {
    int64_t rows = 0;
    for (const Tensor* part : parts) rows += part->numel() / in;
    LinearWeight w;
    if (!options_.fp8_weights || in % 16 != 0) {
      bf16* dst = alloc<bf16>(static_cast<size_t>(rows * in));
      w.w16 = dst;
      for (Tensor* part : parts) {
        const int64_t part_rows = part->numel() / in;
        SS_TRY(put_matrix(*part, dst));
        dst += part_rows * in;
      }
      return w;
    }
    fp8* dst = alloc<fp8>(static_cast<size_t>(rows * in));
    float* scale = alloc<float>(static_cast<size_t>(rows));
    w.w8 = dst;
    w.scale = scale;
    for (Tensor* part : parts) {
      const int64_t part_rows = part->numel() / in;
      fp8_staging.reserve(static_cast<size_t>(part_rows * in));
      SS_TRY(put_matrix(*part, fp8_staging.data()));
      quantize_rows_fp8(fp8_staging.data(), in, part_rows, in, dst, scale, stream_, /*pdl=*/false);
      dst += part_rows * in;
      scale += part_rows;
    }
    // The staging buffer is reused by the next part.
    SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return w;
  };
  auto put_vector = [&](const Tensor& src) -> float* {
    if (!src.defined()) return nullptr;
    SS_CHECK(src.dtype() == DType::kF32 && src.device() == Device::kCpu);
    float* dst = alloc<float>(static_cast<size_t>(src.numel()));
    SS_CUDA_CHECK(cudaMemcpy(dst, src.raw(), src.nbytes(), cudaMemcpyHostToDevice));
    return dst;
  };

  const bool tied = c.tie_word_embeddings;
  embed_ = alloc<bf16>(static_cast<size_t>(c.vocab_size * hidden));
  SS_TRY(put_matrix(weights.embed, embed_));
  const char* head_env = std::getenv("SPECSTACK_FP8_LM_HEAD");
  // cuBLASLt's FP8 GEMMs (the head past the GEMV rows) want 16-aligned extents.
  const bool fp8_head = options_.fp8_weights && hidden % 16 == 0 && c.vocab_size % 16 == 0 &&
                        !(head_env != nullptr && std::string(head_env) == "0");
  if (tied && fp8_head) {  // an e4m3 copy of the embedding, quantized on the device
    fp8* q = alloc<fp8>(static_cast<size_t>(c.vocab_size * hidden));
    float* scale = alloc<float>(static_cast<size_t>(c.vocab_size));
    quantize_rows_fp8(embed_, hidden, c.vocab_size, hidden, q, scale, stream_, /*pdl=*/false);
    lm_head_.w8 = q;
    lm_head_.scale = scale;
    SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    weights.lm_head = Tensor();
  } else if (tied) {
    lm_head_.w16 = embed_;
    weights.lm_head = Tensor();
  } else if (fp8_head) {
    SS_ASSIGN_OR_RETURN(lm_head_, put_linear({&weights.lm_head}, hidden));
  } else {
    bf16* head = alloc<bf16>(static_cast<size_t>(c.vocab_size * hidden));
    SS_TRY(put_matrix(weights.lm_head, head));
    lm_head_.w16 = head;
  }
  final_norm_ = put_vector(weights.final_norm);
  inv_freq_host_ = weights.rope_inv_freq;
  inv_freq_ = put_vector(inv_freq_host_);

  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& src = weights.layers[static_cast<size_t>(l)];
    DeviceLayer layer;
    layer.attn_norm = put_vector(src.attn_norm);
    layer.ffn_norm = put_vector(src.ffn_norm);
    layer.q_norm = put_vector(src.q_norm);
    layer.k_norm = put_vector(src.k_norm);
    SS_ASSIGN_OR_RETURN(layer.qkv, put_linear({&src.wq, &src.wk, &src.wv}, hidden));
    if (src.bq.defined()) {
      std::vector<float> bias(static_cast<size_t>(q_width + 2 * kv_width));
      std::memcpy(bias.data(), src.bq.f32(), q_width * sizeof(float));
      std::memcpy(bias.data() + q_width, src.bk.f32(), kv_width * sizeof(float));
      std::memcpy(bias.data() + q_width + kv_width, src.bv.f32(), kv_width * sizeof(float));
      layer.qkv_bias = alloc<float>(bias.size());
      SS_CUDA_CHECK(cudaMemcpy(layer.qkv_bias, bias.data(), bias.size() * sizeof(float),
                               cudaMemcpyHostToDevice));
    }
    SS_ASSIGN_OR_RETURN(layer.o, put_linear({&src.wo}, q_width));
    layer.o_bias = put_vector(src.bo);
    if (c.layer_is_moe(l)) {
      const int64_t inter = c.moe.expert_intermediate_size;
      layer.router = alloc<bf16>(static_cast<size_t>(c.moe.n_experts * hidden));
      SS_TRY(put_matrix(src.router, layer.router));
      for (ExpertWeights& e : src.experts) {
        DeviceExpert expert;
        SS_ASSIGN_OR_RETURN(expert.gate_up, put_linear({&e.w_gate, &e.w_up}, hidden));
        SS_ASSIGN_OR_RETURN(expert.down, put_linear({&e.w_down}, inter));
        layer.experts.push_back(expert);
      }
    } else {
      const int64_t inter = c.intermediate_size;
      SS_ASSIGN_OR_RETURN(layer.gate_up, put_linear({&src.w_gate, &src.w_up}, hidden));
      SS_ASSIGN_OR_RETURN(layer.down, put_linear({&src.w_down}, inter));
    }
    layers_.push_back(std::move(layer));
  }
  return Status();
}

std::unique_ptr<CudaKvCache> CudaModel::make_kv_cache(int64_t n_blocks, int64_t block_size) {
  auto kv = std::make_unique<CudaKvCache>(kv_shape(n_blocks, block_size), stream_);
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return kv;
}

void CudaModel::ensure_scratch(int64_t n_tokens) {
  if (n_tokens <= scratch_tokens_) return;
  // Reallocation moves buffers the decode graphs point at: they are dropped
  // for good (decode runs eagerly from then on).
  graphs_.clear();
  capture_graphs_.clear();
  const ModelConfig& c = config_;
  const auto t = static_cast<size_t>(n_tokens);
  const auto hidden = static_cast<size_t>(c.hidden_size);
  const auto q_width = static_cast<size_t>(c.n_heads * c.head_dim);
  const auto kv_width = static_cast<size_t>(c.n_kv_heads * c.head_dim);
  size_t inter = static_cast<size_t>(c.intermediate_size);
  x_.resize(t * hidden);
  h_.resize(t * hidden);
  qkv_.resize(t * (q_width + 2 * kv_width));
  attn_.resize(t * q_width);
  delta_.resize(t * hidden);
  if (c.moe.n_experts > 0) {
    const auto k = static_cast<size_t>(c.moe.n_experts_per_token);
    const auto e_inter = static_cast<size_t>(c.moe.expert_intermediate_size);
    router_logits_.resize(t * static_cast<size_t>(c.moe.n_experts));
    topk_ids_.resize(t * k);
    topk_weights_.resize(t * k);
    expert_rows_.resize(t * k);
    expert_weights_.resize(t * k);
    expert_in_.resize(t * k * hidden);
    expert_gate_up_.resize(t * k * 2 * e_inter);
    expert_act_.resize(t * k * e_inter);
    expert_out_.resize(t * k * hidden);
    bool any_dense = false;
    for (int64_t l = 0; l < c.n_layers; ++l) any_dense |= !c.layer_is_moe(l);
    if (!any_dense) inter = 0;
  }
  if (options_.fp8_weights) {
    // The widest input of an FP8 linear, and MoE experts see up to k rows per token.
    const int64_t rows = n_tokens * std::max<int64_t>(1, c.moe.n_experts_per_token);
    const int64_t widest = std::max({c.hidden_size, c.n_heads * c.head_dim, c.intermediate_size,
                                     c.moe.expert_intermediate_size});
    gemm_->reserve_fp8_activations(rows, widest);
  }
  // The fused SwiGLU kernel never writes gate_up_: it holds only the rows of
  // the chunks below its threshold (1.2 GB less at 16K on a 7B, bf16 or FP8).
  int64_t gate_up_rows = 0;
  for (int64_t l = 0; l < c.n_layers && inter > 0; ++l) {
    if (c.layer_is_moe(l)) continue;
    gate_up_rows =
        std::max(gate_up_rows, gemm_->gate_up_scratch_rows(layers_[size_t(l)].gate_up, n_tokens,
                                                           c.intermediate_size, c.hidden_size));
  }
  gate_up_rows_ = gate_up_rows;
  gate_up_.resize(static_cast<size_t>(gate_up_rows) * 2 * inter);
  act_.resize(t * inter);
  scratch_tokens_ = n_tokens;
}

int64_t CudaModel::swiglu_gemm_calls() const {
  return gemm_->swiglu_gemm_calls();
}

}  // namespace specstack::cuda

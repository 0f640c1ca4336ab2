// CudaModel's one-launch decode step (cuda/one_launch_decode.h): which
// steps take it, its per-layer operand table and its launch.
//
// It is off unless SPECSTACK_ONE_LAUNCH_DECODE asks for it: "lookahead" (or
// "1") for SpecPrefill's lookahead steps (batch-1 decode rows whose queries
// are captured: their numbers feed importance scores only, so the kernel's
// own summation order changes no token a request must reproduce), "all" for
// every batch-1 decode step (benchmarks: a draft's speculation steps), "0"
// for none; "stage" turns on its shared-memory staging of later phases'
// operands (OneLaunchDecodeArgs::stage) and "timeline" records its phases
// (one_launch_phase_us), both for A/B. Off by default because every
// version so far measured slower than the kernel chain on an H100
// (docs/benchmarks.md "session 36" and "session 37": 0.5B batch 1 at 8K
// ~790 tok/s against ~1075; the phases' work, not the barriers, is slow).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/cuda_model_internal.h"
#include "cuda/one_launch_decode.h"

namespace specstack::cuda {

void CudaModel::setup_one_launch() {
  const char* env = std::getenv("SPECSTACK_ONE_LAUNCH_DECODE");
  const std::string mode = env != nullptr ? env : "";
  auto has = [&](const char* word) { return mode.find(word) != std::string::npos; };
  one_launch_mode_ = mode == "0"                    ? OneLaunch::kOff
                     : has("all")                   ? OneLaunch::kEveryStep
                     : has("1") || has("lookahead") ? OneLaunch::kLookahead
                                                    : kOneLaunchDefault;
  one_launch_stage_ = has("stage");
  one_launch_grid_ = 0;
  if (one_launch_mode_ == OneLaunch::kOff) return;
  const ModelConfig& c = config_;
  bool ok =
      c.moe.n_experts == 0 && one_launch_decode_supported(c.hidden_size, c.intermediate_size,
                                                          c.n_heads, c.n_kv_heads, c.head_dim);
  for (const DeviceLayer& layer : layers_) {
    // bf16 weights of a dense layer without q/k norms.
    ok = ok && layer.qkv.w16 != nullptr && layer.qkv.w8 == nullptr && layer.o.w16 != nullptr &&
         layer.o.w8 == nullptr && layer.gate_up.w16 != nullptr && layer.gate_up.w8 == nullptr &&
         layer.down.w16 != nullptr && layer.down.w8 == nullptr && layer.q_norm == nullptr &&
         layer.k_norm == nullptr && layer.router == nullptr;
  }
  if (!ok) return;
  one_launch_grid_ =
      one_launch_grid(c.hidden_size, c.intermediate_size, c.n_heads, c.n_kv_heads, c.head_dim);
  if (one_launch_grid_ == 0) return;
  one_launch_down_parts_ = one_launch_parts(c.hidden_size, one_launch_grid_);
  // Benchmarks: a value containing "timeline" records every CTA's barrier
  // arrivals and departures (one_launch_phase_us()).
  if (has("timeline")) {
    one_launch_timeline_.resize(size_t(1 + 5 * c.n_layers) * size_t(one_launch_grid_) * 2);
  }
  one_launch_partials_.resize(
      one_launch_partial_floats(one_launch_grid_, c.n_heads, c.n_kv_heads, c.head_dim));
  one_launch_o_partials_.resize(static_cast<size_t>(c.n_heads * c.hidden_size));
  one_launch_barrier_.resize(1);
  one_launch_barrier_.fill_bytes(0);
  one_launch_capture_.resize(static_cast<size_t>(c.n_layers * c.n_heads * c.head_dim));
}

void CudaModel::prepare_one_launch(CudaKvCache& kv) {
  if (one_launch_grid_ == 0 || one_launch_kv_ == &kv) return;
  const ModelConfig& c = config_;
  std::vector<OneLaunchLayer> table(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const DeviceLayer& src = layers_[l];
    OneLaunchLayer& dst = table[l];
    dst.qkv = src.qkv.w16;
    dst.qkv_bias = src.qkv_bias;
    dst.o = src.o.w16;
    dst.o_bias = src.o_bias;
    dst.gate_up = src.gate_up.w16;
    dst.down = src.down.w16;
    dst.attn_norm = src.attn_norm;
    dst.ffn_norm = src.ffn_norm;
    dst.k_cache = kv.k(static_cast<int64_t>(l));
    dst.v_cache = kv.v(static_cast<int64_t>(l));
    dst.window =
        c.layer_is_sliding(static_cast<int64_t>(l)) ? static_cast<int32_t>(c.sliding_window) : 0;
  }
  // Synchronous: every step before this one has finished (finish_step waits
  // for the stream), so no launch still reads the old table.
  one_launch_layers_.upload(table);
  one_launch_kv_ = &kv;
}

bool CudaModel::one_launch_applies(const StepMeta& meta) const {
  if (one_launch_grid_ == 0 || one_launch_mode_ == OneLaunch::kOff) return false;
  // One decode row of one sequence, paged, wanting its logits.
  if (meta.n_tokens != 1 || meta.n_seqs != 1 || !meta.flash.empty() || meta.n_paged != 1 ||
      meta.paged_begin != 0 || meta.tail_rows_only || meta.n_logit_rows != 1) {
    return false;
  }
  const bool lookahead = meta.capture_device != nullptr || !meta.capture_rows.empty();
  return lookahead || one_launch_mode_ == OneLaunch::kEveryStep;
}

void CudaModel::run_one_launch(const StepMeta& meta, CudaKvCache& kv) {
  SS_CHECK(one_launch_kv_ == &kv);
  SS_CHECK_GE(x_.size(), size_t(2 * config_.hidden_size));  // rows 0 and 1 of the residual scratch
  const ModelConfig& c = config_;
  OneLaunchDecodeArgs a;
  a.layers = one_launch_layers_.data();
  a.n_layers = static_cast<int32_t>(c.n_layers);
  a.hidden = static_cast<int32_t>(c.hidden_size);
  a.inter = static_cast<int32_t>(c.intermediate_size);
  a.n_heads = static_cast<int32_t>(c.n_heads);
  a.n_kv_heads = static_cast<int32_t>(c.n_kv_heads);
  a.head_dim = static_cast<int32_t>(c.head_dim);
  a.eps = static_cast<float>(c.rms_norm_eps);
  a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.embed = embed_;
  a.final_norm = final_norm_;
  a.inv_freq = inv_freq_;
  a.token = meta.ids;
  a.position = meta.pos;
  a.write_slot = meta.slot_mapping;
  a.context_slot = meta.paged_slot;
  a.block_table = meta.block_tables;  // row 0: the step's one sequence
  a.block_size = static_cast<int32_t>(kv.shape().block_size);
  a.slot_positions = kv.slot_positions();
  a.x = x_.data();
  a.q = qkv_.data();
  a.o_partials = one_launch_o_partials_.data();
  a.act = act_.data();
  a.out = h_.data();
  const bool eager_capture = meta.capture_device == nullptr && !meta.capture_rows.empty();
  a.capture = meta.capture_device != nullptr ? meta.capture_device
              : eager_capture                ? one_launch_capture_.data()
                                             : nullptr;
  a.partials = one_launch_partials_.data();
  a.barrier = one_launch_barrier_.data();
  a.down_parts = one_launch_down_parts_;
  a.stage = one_launch_stage_;
  a.max_splits = one_launch_max_splits_;
  a.timeline = one_launch_timeline_.size() > 0 ? one_launch_timeline_.data() : nullptr;
  one_launch_decode(a, one_launch_grid_, stream_);
  ++one_launch_steps_;
  if (eager_capture) {  // capture_host_ row 0: [n_layers, H * D], as attention() copies it
    const size_t count = size_t(c.n_layers) * size_t(c.n_heads * c.head_dim);
    SS_CUDA_CHECK(cudaMemcpyAsync(capture_host_, one_launch_capture_.data(), count * sizeof(bf16),
                                  cudaMemcpyDeviceToHost, stream_));
  }
}

std::vector<double> CudaModel::one_launch_phase_us() const {
  std::vector<double> out;
  if (one_launch_timeline_.size() == 0 || one_launch_grid_ == 0) return out;
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  const std::vector<unsigned long long> t = one_launch_timeline_.download();
  const size_t grid = size_t(one_launch_grid_);
  const size_t layers = (t.size() / (2 * grid) - 1) / 5;
  auto at = [&](size_t barrier, size_t cta, int which) {
    return double(t[(barrier * grid + cta) * 2 + size_t(which)]) / 1e3;
  };
  // Per phase: [span, slowest CTA's work, median work, barrier after the last arrival].
  out.assign(20, 0.0);
  std::vector<double> work(grid);
  for (size_t l = 0; l < layers; ++l) {
    for (size_t p = 0; p < 5; ++p) {
      const size_t k = 1 + 5 * l + p;
      double last_arrival = 0.0, left = 0.0, started = 0.0;
      for (size_t c = 0; c < grid; ++c) {
        work[c] = at(k, c, 0) - at(k - 1, c, 1);
        last_arrival = std::max(last_arrival, at(k, c, 0));
        left += at(k, c, 1) / double(grid);
        started += at(k - 1, c, 1) / double(grid);
      }
      std::sort(work.begin(), work.end());
      out[4 * p] += left - started;
      out[4 * p + 1] += work.back();
      out[4 * p + 2] += work[grid / 2];
      out[4 * p + 3] += left - last_arrival;
    }
  }
  for (double& v : out) v /= double(layers);
  return out;
}

}  // namespace specstack::cuda

// CudaModel: the decoder-only forward pass on one NVIDIA GPU. Weights are
// bf16 (or the linear layers e4m3, CudaModelOptions::fp8_weights) in device memory (q/k/v and
// gate/up fused into one matrix each, so a layer runs 4 GEMMs), activations bf16 with an f32
// residual stream, cuBLAS GEMMs with fp32 accumulation, and the kernels of src/cuda for the rest.
// Attention runs flash-style for long prefill chunks and as split-K paged
// attention for decode and short chunks. Decode steps of common batch sizes
// replay CUDA graphs captured at start-up (see cuda_graphs.cpp).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "base/status.h"
#include "cuda/cuda_kv_cache.h"
#include "cuda/device_buffer.h"
#include "cuda/gemm.h"
#include "cuda/one_launch_decode.h"
#include "cuda/sampling.h"
#include "model/forward_model.h"
#include "specprefill/attention_capture.h"

namespace specstack::cuda {

using bf16 = __nv_bfloat16;

struct CudaModelOptions {
  int device_index = 0;
  // Activation scratch is allocated up front for this many tokens per step
  // (grown on demand past it), so the KV pool can take the rest of memory.
  int64_t max_tokens_per_step = 8192;
  // Decode graphs: captured for these batch sizes once the KV cache exists
  // (capture_decode_graphs); empty disables them.
  std::vector<int32_t> graph_batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  // Paged attention (verify runs and decode rows, eager and graph steps)
  // uses the run kernel of verify_attention.h where the head dim allows;
  // false keeps the per-token kernel (for comparing the two).
  bool run_attention = true;
  // --quantization fp8: every linear layer's weight (q/k/v/o, gate/up/down,
  // experts) quantized to e4m3 at load with per-output-channel scales
  // (cuda/fp8_quantize.h), and the LM head too (a tied head gets an e4m3
  // copy of the embedding, which stays bf16 for the lookup; at batch 1 the
  // bf16 head was ~10% of an FP8 step's bytes); the embedding and the MoE
  // router stay bf16. Matrices whose rows are not a multiple of 16 stay bf16
  // too (the FP8 GEMM and GEMV need 16-byte rows). SPECSTACK_FP8_LM_HEAD=0
  // keeps the head in bf16 (for A/B runs).
  bool fp8_weights = false;
  // With fp8_weights: prefill attention (flash jobs) on e4m3 operands where
  // flash_attention_fp8_supported (Hopper, head dim 64 / 128, no sliding
  // window; cuda/flash_attention_fp8.h), the KV cache staying bf16.
  // Taken for jobs of at least flash_attention_fp8_min_keys keys, where it
  // pays. SPECSTACK_FP8_ATTENTION=0 keeps the bf16 kernel, =all takes the
  // e4m3 one for every supported job (A/B runs, tests).
  bool fp8_attention = false;
};

struct DeviceExpert {
  LinearWeight gate_up;  // [2 * expert_inter, hidden]
  LinearWeight down;     // [hidden, expert_inter]
};

struct DeviceLayer {
  float* attn_norm = nullptr;  // [hidden]
  float* ffn_norm = nullptr;   // [hidden]
  LinearWeight qkv;            // [(n_heads + 2 n_kv_heads) * head_dim, hidden]
  float* qkv_bias = nullptr;   // [(n_heads + 2 n_kv_heads) * head_dim] or null
  LinearWeight o;              // [hidden, n_heads * head_dim]
  float* o_bias = nullptr;     // [hidden] or null
  float* q_norm = nullptr;     // [head_dim] or null
  float* k_norm = nullptr;     // [head_dim] or null
  LinearWeight gate_up;        // [2 * intermediate, hidden] (dense layers)
  LinearWeight down;           // [hidden, intermediate]
  bf16* router = nullptr;      // [n_experts, hidden] (MoE layers)
  std::vector<DeviceExpert> experts;
};

class CudaModel final : public ForwardModel {
 public:
  // Takes host or device weights (a DeviceDummySource makes device ones) and
  // moves them into the fused device layout, releasing each source tensor as
  // soon as it is copied.
  static Result<std::unique_ptr<CudaModel>> create(ModelConfig config, ModelWeights weights,
                                                   const CudaModelOptions& options);
  ~CudaModel() override;

  Device device() const override { return Device::kCuda; }
  const ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override { return weight_bytes_; }
  KeptRows kept_rows() const override {
    return KeptRows{kept_.data(), n_kept_, config_.vocab_size, /*on_device=*/true};
  }
  int64_t device_memory_used_bytes() const override {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return -1;
    return static_cast<int64_t>(total_bytes - free_bytes);
  }
  const Tensor& rope_inv_freq() const override { return inv_freq_host_; }
  void forward(const ForwardBatch& batch, KvCache& kv, Tensor& logits) override;
  // Follow steps replay one decode (or capture) graph each, queued back to
  // back with the picks fed from device memory (cuda_graphs.cpp); false
  // where a step does not fit a graph or the last forward did not pick its
  // tokens on the device.
  bool forward_follow(std::span<const ForwardBatch> steps, KvCache& kv) override;

  cudaStream_t stream() const { return stream_; }
  std::unique_ptr<CudaKvCache> make_kv_cache(int64_t n_blocks, int64_t block_size);

  // Captures the decode graphs for options.graph_batch_sizes against `kv`
  // (the cache every later forward uses); max_context bounds the contexts the
  // graphs serve (longer ones run eagerly).
  void capture_decode_graphs(CudaKvCache& kv, int32_t max_context);
  int64_t graph_replays() const { return graph_replays_; }
  // Follow steps run by forward_follow (tests prove the path ran).
  int64_t follow_steps() const { return follow_steps_; }
  // Eager steps whose last layer ran for the logit rows alone (tests).
  int64_t tail_steps() const { return tail_steps_; }
  // Gate/up projections that ran the fused SwiGLU kernel (tests prove the path ran).
  int64_t swiglu_gemm_calls() const;
  // Batch-1 decode steps launched (or captured into a graph) as one kernel
  // (cuda/one_launch_decode.h; tests prove the path ran).
  int64_t one_launch_steps() const { return one_launch_steps_; }
  // Flash attention calls (one a job and layer) that ran on e4m3 operands.
  int64_t fp8_attention_jobs() const { return fp8_attention_jobs_; }
  // Whether this model's shapes and weights take the one-launch step at all.
  bool one_launch_available() const { return one_launch_grid_ > 0; }
  // Tests: at most this many key splits a kv head in the one-launch step's
  // attention (OneLaunchDecodeArgs::max_splits; 0: the kernel's choice).
  void set_one_launch_max_splits(int32_t splits) { one_launch_max_splits_ = splits; }
  // Benchmarks (SPECSTACK_ONE_LAUNCH_DECODE containing "timeline"): the last
  // one-launch step's phases A, B, C, E, F in microseconds, averaged over
  // the layers, four numbers each: its span (mean departures from barrier
  // to barrier), the slowest CTA's work (departure to next arrival), the
  // median CTA's work, and the barrier's release after the last arrival;
  // empty otherwise. Waits for the stream.
  std::vector<double> one_launch_phase_us() const;

  // SpecPrefill importance of slots [slot_begin, slot_end) of a draft
  // sequence, computed on the device from the captured queries and the paged
  // keys of `kv` (cuda/score.h).
  Result<std::vector<float>> score_prompt(const AttentionCapture& capture, CudaKvCache& kv,
                                          std::span<const int32_t> block_table, int64_t slot_begin,
                                          int64_t slot_end, int64_t pool_kernel);

  // Implementation records (cuda_model_internal.h).
  struct StepMeta;
  struct Graph;

 private:
  explicit CudaModel(ModelConfig config, const CudaModelOptions& options);
  Status load(ModelWeights weights);
  template <typename T>
  T* alloc(size_t count);
  void ensure_scratch(int64_t n_tokens);
  // plan_step's run_group: query heads per kv head with the run kernel on, else 0.
  int32_t run_group() const {
    return options_.run_attention ? static_cast<int32_t>(config_.n_heads / config_.n_kv_heads) : 0;
  }

  // The forward body on device data already staged by prepare_meta.
  void run_layers(const StepMeta& meta, CudaKvCache& kv, bool graph_safe);
  // Logits of the step's logit rows from the final-normed rows in h_
  // (rows_gathered: h_ holds exactly those rows, in logit order).
  void lm_head(const StepMeta& meta, bool rows_gathered);
  // The one-launch decode step (cuda_one_launch.cpp): set up after load
  // (mode from SPECSTACK_ONE_LAUNCH_DECODE, shapes, state), its layer table
  // for `kv` (uploaded when the cache changes; never during a capture),
  // whether a step takes it, and the launch (h_'s row 0 gets the final norm).
  void setup_one_launch();
  void prepare_one_launch(CudaKvCache& kv);
  bool one_launch_applies(const StepMeta& meta) const;
  void run_one_launch(const StepMeta& meta, CudaKvCache& kv);
  // x8: the attention norm's output as e4m3 rows (FP8 prefill), else h_ holds it in bf16.
  // tail: K/V for every row, attention and o for the logit rows alone (o's
  // output in delta_'s first n_logit_rows rows; StepMeta::tail_rows_only).
  // Returns the o projection's scales when it left them to the next norm, else {}.
  Fp8Scales attention(int64_t layer, const StepMeta& meta, CudaKvCache& kv, bool graph_safe,
                      const Fp8Rows* x8, bool tail);
  void moe_mlp(const DeviceLayer& layer, int64_t n_tokens);
  // The graph a decode-shaped batch replays, or null (eager).
  Graph* replay_graph(const ForwardBatch& batch, const CudaKvCache& kv);
  bool try_graph_forward(const ForwardBatch& batch, CudaKvCache& kv, Tensor& logits);
  std::unique_ptr<Graph> capture_graph(CudaKvCache& kv, int32_t batch_size, bool with_capture);
  // Copies the first n_rows rows of logits_ to the host, or with
  // batch.picked_tokens picks every row's token on the device and copies
  // down the ids and the host rows' logits only; waits for the stream.
  void finish_step(const ForwardBatch& batch, int32_t n_rows, Tensor& logits);
  // The sampling kernel's per-row inputs on the device.
  struct PickInputs {
    const float* temperature = nullptr;     // [rows]
    const int32_t* top_k = nullptr;         // [rows]
    const float* top_p = nullptr;           // [rows]
    const float* min_p = nullptr;           // [rows]
    const float* uniform = nullptr;         // [rows]
    const int32_t* top_logprobs = nullptr;  // [rows] -1: no logprobs
    const int32_t* keep = nullptr;          // [rows] kept row or -1 (ForwardBatch::keep_rows)
    int32_t max_top_logprobs = -1;          // over the rows; -1: no row wants logprobs
    TokenMaskRows mask;                     // empty when no row is masked
    bool all_greedy = false;                // every row's temperature <= 0 (or NaN)
  };
  // The step's row sampling (ForwardBatch::sampling; empty: argmax) and
  // grammar masks (ForwardBatch::masks) to the device in one copy on the stream.
  PickInputs upload_pick_inputs(const ForwardBatch& batch, int32_t n_rows);
  // picked_ids_ = the rows' tokens from logits_ (sample_tokens; greedy_tokens,
  // many CTAs a row, when every row is greedy).
  void pick_tokens(int32_t n_rows, const PickInputs& in);
  // The picked tokens' logprobs (cuda/logprobs.h) computed and queued for
  // the host; collect_logprobs, after the stream sync, fills batch.logprobs.
  void queue_logprobs(int32_t n_rows, const PickInputs& in);
  void collect_logprobs(const ForwardBatch& batch, int32_t n_rows);
  // Copies the rows batch.keep_rows names into kept_ (grown, contents kept:
  // a draft keeps the rows of its k forwards in one round).
  void keep_rows(const ForwardBatch& batch, int32_t n_rows, const PickInputs& in);
  // batch.verifications (cuda/verification.h) queued with their inputs and
  // the outcomes' copy to the host; collect_verifications, after the stream
  // sync, fills batch.verified.
  void queue_verifications(const ForwardBatch& batch);
  void collect_verifications(const ForwardBatch& batch);

  ModelConfig config_;
  CudaModelOptions options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;
  std::deque<DeviceBuffer<uint8_t>> allocations_;  // weights, one buffer each
  size_t weight_bytes_ = 0;
  Tensor inv_freq_host_;  // [head_dim / 2] f32
  float* inv_freq_ = nullptr;
  bf16* embed_ = nullptr;  // [vocab, hidden]
  LinearWeight lm_head_;   // [vocab, hidden] (w16 == embed_ when tied and bf16)
  float* final_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;

  // Activations (device), sized for scratch_tokens_ rows.
  int64_t scratch_tokens_ = 0;
  bool tail_rows_only_ = true;  // StepMeta::tail_rows_only allowed (SPECSTACK_LAST_LAYER_ALL_ROWS)
  DeviceBuffer<float> x_;       // [T, hidden] residual stream
  DeviceBuffer<bf16> h_;        // [T, hidden] normed input of a block
  DeviceBuffer<bf16> qkv_;      // [T, (H + 2 Hkv) * D]
  DeviceBuffer<bf16> attn_;     // [T, H * D]
  DeviceBuffer<bf16> delta_;    // [T, hidden] o_proj / down_proj output
  DeviceBuffer<bf16> gate_up_;  // [gate_up_rows_, 2 * inter] (Gemm::gate_up_scratch_rows)
  int64_t gate_up_rows_ = 0;
  DeviceBuffer<bf16> act_;            // [T, inter]
  DeviceBuffer<bf16> head_in_;        // [rows, hidden] final-normed rows that want logits
  DeviceBuffer<float> logits_;        // [rows, vocab]
  DeviceBuffer<int32_t> picked_ids_;  // [rows] chosen tokens
  DeviceBuffer<unsigned long long> greedy_keys_;  // greedy_tokens' per-slice keys
  int32_t device_picks_ = -1;  // rows of picked_ids_ the last forward picked; -1: none
  // [5 * rows] sampling parameters, then [rows] row_mask and [n_masks, ceil(vocab / 32)]
  // bits (upload_pick_inputs)
  DeviceBuffer<uint32_t> pick_inputs_;
  DeviceBuffer<float> logprob_values_;  // [rows, 1 + logprobs_width_] picked token's, then top
  DeviceBuffer<int32_t> logprob_ids_;   // [rows, logprobs_width_] top tokens
  int32_t logprobs_width_ = 0;          // the step's largest top_logprobs
  DeviceBuffer<float> kept_;            // [n_kept_, vocab] rows kept for a target's verification
  int64_t n_kept_ = 0;
  DeviceBuffer<uint32_t> verify_inputs_;  // queue_verifications' staging, on the device
  DeviceBuffer<uint8_t> verify_scratch_;  // verify_draft_rows' row summaries
  DeviceBuffer<int32_t> verify_out_;      // [verifications, 2] n_accepted, next token
  DeviceBuffer<float> attn_workspace_;    // paged attention split-K partials
  DeviceBuffer<bf16> compact_q_;    // [n, H * D] paged-path queries when not a contiguous range
  DeviceBuffer<bf16> compact_out_;  // [n, H * D]
  DeviceBuffer<float> tail_x_;      // [logit rows, hidden] the last layer's residual rows
  DeviceBuffer<bf16> tail_attn_;    // [logit rows, H * D] their attention outputs
  // flash_attention_fp8's quantized operands (grown to the largest job seen).
  DeviceBuffer<uint8_t> fp8_attention_workspace_;
  bool fp8_attention_all_ = false;  // SPECSTACK_FP8_ATTENTION=all
  int64_t fp8_attention_jobs_ = 0;  // flash jobs (x layers) run on the e4m3 kernel
  // score_prompt's scratch (grown, kept between prompts).
  DeviceBuffer<float> score_queries_;    // [n_steps, n_layers, H * D]
  DeviceBuffer<int32_t> score_table_;    // the scored sequence's block table
  DeviceBuffer<float> score_out_;        // [n_tokens] importance
  DeviceBuffer<float> score_workspace_;  // score_workspace_floats(...)
  // MoE scratch.
  DeviceBuffer<float> router_logits_;   // [T, E]
  DeviceBuffer<int32_t> topk_ids_;      // [T, k]
  DeviceBuffer<float> topk_weights_;    // [T, k]
  DeviceBuffer<int32_t> expert_rows_;   // [T * k] token rows grouped by expert
  DeviceBuffer<float> expert_weights_;  // [T * k]
  DeviceBuffer<bf16> expert_in_;        // [T * k, hidden]
  DeviceBuffer<bf16> expert_gate_up_;   // [T * k, 2 * expert_inter]
  DeviceBuffer<bf16> expert_act_;       // [T * k, expert_inter]
  DeviceBuffer<bf16> expert_out_;       // [T * k, hidden]
  // Step metadata: one pinned host staging buffer and its device copy.
  std::unique_ptr<StepMeta> meta_;
  DeviceBuffer<int32_t> meta_device_;
  int32_t* meta_host_ = nullptr;  // pinned
  size_t meta_host_capacity_ = 0;
  float* logits_host_ = nullptr;  // pinned [rows, vocab]
  size_t logits_host_capacity_ = 0;
  bf16* capture_host_ = nullptr;  // pinned captured query rows
  size_t capture_host_capacity_ = 0;
  int32_t* follow_host_ = nullptr;  // pinned: forward_follow's metadata, picks, queries
  size_t follow_host_capacity_ = 0;
  uint32_t* pick_host_ = nullptr;  // pinned staging of pick_inputs_
  size_t pick_host_capacity_ = 0;
  float* score_host_ = nullptr;  // pinned: score_prompt's queries, block table, importance
  size_t score_host_capacity_ = 0;
  float* logprobs_host_ = nullptr;  // pinned: logprob_values_ then logprob_ids_
  size_t logprobs_host_capacity_ = 0;
  uint32_t* verify_host_ = nullptr;  // pinned: verification inputs, then the outcomes
  size_t verify_host_capacity_ = 0;
  size_t verify_out_offset_ = 0;  // words into verify_host_ where the outcomes land
  // Decode graphs by batch size.
  std::map<int32_t, std::unique_ptr<Graph>> graphs_;
  // The same with query capture, for SpecPrefill's draft lookahead steps
  // (small batches only: every row's queries are copied out).
  std::map<int32_t, std::unique_ptr<Graph>> capture_graphs_;
  int32_t graph_max_context_ = 0;
  CudaKvCache* graph_kv_ = nullptr;
  int64_t graph_replays_ = 0;
  // forward_follow replays graphs back to back (else it declines and the
  // runner plans the steps one by one); SPECSTACK_FOLLOW_GRAPHS=0 / 1 overrides.
  static constexpr bool kFollowGraphsDefault = true;
  bool follow_graphs_ = kFollowGraphsDefault;
  int64_t follow_steps_ = 0;
  int64_t tail_steps_ = 0;
  // The one-launch decode step: which batch-1 decode steps take it.
  enum class OneLaunch { kOff, kLookahead, kEveryStep };
  // Without SPECSTACK_ONE_LAUNCH_DECODE (cuda_one_launch.cpp says why).
  static constexpr OneLaunch kOneLaunchDefault = OneLaunch::kOff;
  OneLaunch one_launch_mode_ = kOneLaunchDefault;
  bool one_launch_stage_ = false;
  int32_t one_launch_grid_ = 0;  // CTAs; 0: this model does not take it
  int32_t one_launch_down_parts_ = 1;
  int32_t one_launch_max_splits_ = 0;
  const CudaKvCache* one_launch_kv_ = nullptr;            // the cache the table names
  DeviceBuffer<OneLaunchLayer> one_launch_layers_;        // [n_layers]
  DeviceBuffer<float> one_launch_partials_;               // attention split partials
  DeviceBuffer<float> one_launch_o_partials_;             // [n_heads, hidden]
  DeviceBuffer<unsigned long long> one_launch_timeline_;  // benchmarks: phase ends of the last step
  DeviceBuffer<unsigned long long> one_launch_barrier_;   // [1] grid barrier counter
  DeviceBuffer<bf16> one_launch_capture_;                 // eager capture steps: [n_layers, H * D]
  int64_t one_launch_steps_ = 0;
};

}  // namespace specstack::cuda

// Backend: the ops a model's forward pass needs, behind one interface. The CPU
// backend is the oracle every other backend is compared against.
//
// Conventions: activations are f32 row-major 2-D tensors [rows, cols] unless
// noted; weights are [out, in] (HF layout) in f32, bf16 or f16 and are used
// as stored (bf16 weights are converted per tile inside matmul, never
// expanded to an f32 copy of the model). Outputs are preallocated by the
// caller with the right shape.
#pragma once

#include <cstdint>
#include <span>

#include "backend/attention_batch.h"
#include "tensor/tensor.h"

namespace specstack {

enum class BackendOp : uint8_t {
  kOpEmbedding,
  kOpMatmul,
  kOpRmsnorm,
  kOpAdd,
  kOpRope,
  kOpSiluMul,
  kOpSoftmax,
  kOpWriteKv,
  kOpAttention,
  kOpCount,
};

const char* backend_op_name(BackendOp op);

// Wall time spent in each op, for "where does the time go" reports.
struct OpProfile {
  double seconds[static_cast<size_t>(BackendOp::kOpCount)] = {};
  int64_t calls[static_cast<size_t>(BackendOp::kOpCount)] = {};
  void reset() { *this = OpProfile(); }
  double total_seconds() const;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // Profiling is off by default; when on, each op's wall time is accumulated.
  void set_profiling(bool enabled) { profiling_ = enabled; }
  bool profiling() const { return profiling_; }
  OpProfile& profile() { return profile_; }

  // out[i, :] = table[ids[i], :] as f32.      table [vocab, dim], out [n, dim]
  virtual void embedding(const Tensor& table, std::span<const int32_t> ids, Tensor& out) = 0;

  // y = x · wᵀ (+ bias).   x [n, in] f32, w [out, in], bias [out] f32 or null, y [n, out] f32
  virtual void matmul(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) = 0;

  // y[r, :] = weight * x[r, :] / sqrt(mean(x[r, :]²) + eps), fp32.
  // x, y [rows, dim] (may alias); weight [dim] f32. Per-head norms pass
  // x viewed as [tokens * heads, head_dim].
  virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y) = 0;

  // x += y, elementwise, same shape.
  virtual void add_inplace(Tensor& x, const Tensor& y) = 0;

  // HF rotate_half RoPE in place: for each row r (token) and head h, dims j and
  // j + head_dim/2 rotate by angle positions[r] * inv_freq[j].
  // x [n, heads * head_dim]; positions [n]; inv_freq [head_dim / 2] f32.
  virtual void rope(Tensor& x, int64_t head_dim, std::span<const int32_t> positions,
                    const Tensor& inv_freq) = 0;

  // out = silu(gate) * up.   gate, up, out [n, width] (out may alias gate)
  virtual void silu_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;

  // Row-wise softmax in place, fp32.   x [rows, cols]
  virtual void softmax_rows(Tensor& x) = 0;

  // Writes each token's k and v rows into its paged KV slot (and records the
  // slot's position for sliding-window masking).
  // k, v [n_tokens, n_kv_heads * head_dim]
  virtual void write_kv(const Tensor& k, const Tensor& v, const AttentionBatch& batch,
                        KvLayerView& layer) = 0;

  // Causal (by slot order) attention over the paged KV of each token's
  // sequence, GQA, optional sliding window by position distance.
  // q [n_tokens, n_heads * head_dim] (post-RoPE), out [n_tokens, n_heads * head_dim]
  virtual void attention(const Tensor& q, const AttentionBatch& batch, const KvLayerView& layer,
                         const AttentionParams& params, Tensor& out) = 0;

 protected:
  bool profiling_ = false;
  OpProfile profile_;
};

}  // namespace specstack

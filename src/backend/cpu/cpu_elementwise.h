// CPU kernels for the row-wise and elementwise ops of a forward pass
// (semantics and shapes as documented in backend/backend.h). Each is
// parallelised over rows on the pool once the input is big enough to pay for
// the fork-join; small inputs stay on the calling thread.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/simd.h"
#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace specstack::cpu {

// table [vocab, dim] f32/bf16/f16, out [ids.size(), dim] f32.
void embedding(ThreadPool& pool, const Tensor& table, std::span<const int32_t> ids, Tensor& out,
               Isa isa = kNativeIsa);

// x, y [rows, dim] f32 (may alias), weight [dim] f32.
void rmsnorm(ThreadPool& pool, const Tensor& x, const Tensor& weight, float eps, Tensor& y,
             Isa isa = kNativeIsa);

// x += y; same element count, f32.
void add_inplace(ThreadPool& pool, Tensor& x, const Tensor& y, Isa isa = kNativeIsa);

// x [n, heads * head_dim] f32, positions [n], inv_freq [head_dim / 2] f32.
// Angles are (float)position * inv_freq[j] with cos/sin in fp32, as PyTorch
// computes them, so logits agree with HF references.
void rope(ThreadPool& pool, Tensor& x, int64_t head_dim, std::span<const int32_t> positions,
          const Tensor& inv_freq);

// out = gate / (1 + exp(-gate)) * up.   gate, up, out [n, width] f32 (out may alias gate or up)
void silu_mul(ThreadPool& pool, const Tensor& gate, const Tensor& up, Tensor& out,
              Isa isa = kNativeIsa);

// Stable row-wise softmax in place; -inf entries get 0 and a row of only
// -inf becomes all zeros.   x [rows, cols] f32
void softmax_rows(ThreadPool& pool, Tensor& x, Isa isa = kNativeIsa);

// One row of softmax_rows, for kernels that build their own score rows
// (attention). x [n] f32, in place.
void softmax_row(float* x, int64_t n, Isa isa = kNativeIsa);

// out[i] = e^x[i] (the vectorised exp the kernels use, exposed for tests).
void exp_f32(const float* x, int64_t n, float* out, Isa isa = kNativeIsa);

}  // namespace specstack::cpu

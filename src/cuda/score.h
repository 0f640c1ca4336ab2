// SpecPrefill token importance on the device (ALGORITHM.md step 3): the
// draft's captured lookahead queries against its paged prompt keys, without
// copying keys to the host. Same definition as specprefill/scorer.h (its
// CPU twin):
//   A[l,h,t] = softmax(q[t,l,h] . K[l, h / (H/Hkv)]^T / sqrt(D))  over the scored keys, fp32
//   P[l,h,t] = avg_pool1d(A[l,h,t], pool_kernel, stride 1, zero padding, divisor pool_kernel)
//   I[j]     = mean_t ( max_{l in layers, h} P[l,h,t][j] )
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

using bf16 = __nv_bfloat16;

struct ScoreArgs {
  const float* queries = nullptr;  // [n_steps, n_layers, n_heads * head_dim] f32 (device), post-RoPE
  int32_t n_steps = 0;
  int32_t n_layers = 0;  // layers in `queries`
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  // Layers to score (host array of n_scored indices into [0, n_layers)) and
  // their K caches (host array, indexed by layer, of device pointers to
  // [n_blocks, block_size, n_kv_heads, head_dim] bf16).
  const int32_t* scored_layers = nullptr;
  int32_t n_scored = 0;
  const bf16* const* k_caches = nullptr;
  const int32_t* block_table = nullptr;  // device: the draft sequence's physical blocks
  int32_t block_size = 0;
  int32_t slot_begin = 0;  // scored keys are slots [slot_begin, slot_end); token i = slot_begin + i
  int32_t slot_end = 0;
  int32_t pool_kernel = 13;    // odd, >= 1
  float* importance = nullptr;  // [slot_end - slot_begin] f32 (device)
  float* workspace = nullptr;   // score_workspace_floats(...) floats
};

size_t score_workspace_floats(int32_t n_steps, int32_t n_heads, int32_t n_tokens);

void score_tokens(const ScoreArgs& args, cudaStream_t stream);

}  // namespace specstack::cuda

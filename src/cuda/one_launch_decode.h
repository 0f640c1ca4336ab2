// A whole batch-1 decode step's layers in ONE persistent launch.
//
// Why: a small draft's decode step is a latency chain, not a bandwidth
// problem. The 0.5B draft's SpecPrefill lookahead step at 8K replayed ~220
// kernels (24 layers of norm, qkv + rope, query capture, attention, its
// combine, o, norm, gate/up + SiLU, down) in ~0.95 ms on an H100 against
// 0.33 ms of weights (docs/benchmarks.md "session 35", section 2): every
// kernel boundary is a drain, a launch and a ramp. Here one CTA per SM runs
// the layers' phases back to back and meets the others at a grid barrier
// between phases (5 a layer). Optionally (`stage`) each CTA copies its
// slices of the next phases' weights (and its split of phase B's keys and
// values) into shared memory a phase or two ahead (cp.async), so that a
// phase after its barrier finds its operands on chip; what does not fit is
// prefetched into L2.
//
// Phases of a layer (every CTA takes units blockIdx.x, + gridDim.x, ...):
//   A  rmsnorm of the residual (each CTA redundantly, in registers), the
//      q/k/v rows (a unit: 8 rotary pairs of a q or k head, or 16 v rows),
//      bias, RoPE, the K/V write into the paged cache, q (and its capture
//      for SpecPrefill's scoring);
//   B  attention: a unit is one kv head's share of the keys (split-K,
//      online softmax in f32, every query head of the GQA group), written
//      as partials;
//   C  a unit is (query head, block of o rows): it merges the head's
//      partials (one round of loads, all in flight) into its bf16 output and
//      multiplies it by the head's columns of o for its rows: f32 partial
//      sums [H, hidden];
//   E  every CTA sums the o partials (+ bias, one bf16 rounding, as the o
//      GEMV's output) into the residual, rmsnorms it, and computes its gate
//      and up rows of the same columns: bf16(silu(g) u);
//   F  down projection added into the residual.
// After the last layer CTA 0 writes the final rmsnorm; the LM head and the
// token choice stay the model's usual kernels.
//
// Numerics follow the unfused kernels' conventions (f32 sums of bf16
// products, bf16 outputs of every projection, the residual in f32, HF's
// rmsnorm and rotate_half order) but not their summation order, so results
// equal the multi-kernel step to bf16 rounding, not bit for bit
// (tests/cuda/one_launch_decode_test.cpp).
//
// Co-residency: the grid is at most one CTA per SM with the occupancy
// checked at launch, so every CTA is resident once earlier kernels drain;
// a barrier only ever waits for CTAs of its own launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

// One layer's device operands (dense, bf16 weights, no q/k norm).
struct OneLaunchLayer {
  const __nv_bfloat16* qkv = nullptr;      // [(H + 2 Hkv) * D, hidden] q | k | v rows
  const float* qkv_bias = nullptr;         // [(H + 2 Hkv) * D] or null
  const __nv_bfloat16* o = nullptr;        // [hidden, H * D]
  const float* o_bias = nullptr;           // [hidden] or null
  const __nv_bfloat16* gate_up = nullptr;  // [2 * inter, hidden]: gate rows, then up rows
  const __nv_bfloat16* down = nullptr;     // [hidden, inter]
  const float* attn_norm = nullptr;        // [hidden]
  const float* ffn_norm = nullptr;         // [hidden]
  __nv_bfloat16* k_cache = nullptr;        // [n_slots, Hkv * D]
  __nv_bfloat16* v_cache = nullptr;        // [n_slots, Hkv * D]
  int32_t window = 0;                      // sliding window (keys with pos > p - window); 0: none
};

struct OneLaunchDecodeArgs {
  const OneLaunchLayer* layers = nullptr;  // [n_layers], device memory
  int32_t n_layers = 0;
  int32_t hidden = 0;
  int32_t inter = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float eps = 0.0f;                      // rmsnorm epsilon
  float scale = 0.0f;                    // attention scale, 1 / sqrt(head_dim)
  const __nv_bfloat16* embed = nullptr;  // [vocab, hidden]
  const float* final_norm = nullptr;     // [hidden]
  const float* inv_freq = nullptr;       // [head_dim / 2]
  // The step's one row (device metadata, read-only here).
  const int32_t* token = nullptr;         // [1] token id
  const int32_t* position = nullptr;      // [1] RoPE position
  const int32_t* write_slot = nullptr;    // [1] physical cache slot for its K/V; < 0: none
  const int32_t* context_slot = nullptr;  // [1] its slot in the sequence: keys [0, slot] visible
  const int32_t* block_table = nullptr;   // [>= context_slot / block_size + 1] physical blocks
  int32_t block_size = 0;
  int32_t* slot_positions = nullptr;  // [n_slots] each slot's position (written for write_slot)
  // Outputs and scratch (device; every buffer at least as long as noted).
  float* x = nullptr;                     // [2, hidden] the residual stream; row 1: after attention
  float* o_partials = nullptr;            // [H, hidden] each head's share of the o projection
  __nv_bfloat16* q = nullptr;             // [H * D] rotated queries
  __nv_bfloat16* act = nullptr;           // [inter] SwiGLU output
  __nv_bfloat16* out = nullptr;           // [hidden] final rmsnorm, the LM head's input
  __nv_bfloat16* capture = nullptr;       // [n_layers, H * D] rotated queries, or null
  float* partials = nullptr;              // one_launch_partial_floats(...)
  unsigned long long* barrier = nullptr;  // [1], zero before the first launch (monotonic)
  int32_t down_parts = 1;                 // warps per down row (one_launch_parts)
  int32_t max_splits = 0;  // key splits per kv head at most; 0: gridDim / Hkv (tests lower it)
  // Staging: each CTA copies its later phases' weight slices (and phase B's
  // keys) into shared memory ahead, L2-prefetching what does not fit. Off:
  // every operand is read when its phase needs it (measured faster on an
  // H100, docs/benchmarks.md "session 37": the copies' traffic delays the
  // latency-bound phases more than it saves).
  bool stage = false;
  // Set by one_launch_decode (from the shapes, the grid and the device's
  // shared memory), not by callers: the stages' bytes.
  int32_t stage_mid = 0;   // C's o columns, F's down rows
  int32_t stage_wide = 0;  // E's gate/up rows; also B's keys and values, then A's qkv rows
  int32_t stage_qkv = 0;   // the tail of stage_wide that A's rows take
  // Benchmarks: when set, every CTA records the global timer (ns) at its
  // start and at its arrival at and departure from every grid barrier:
  // [1 + 5 * n_layers][grid][arrival, departure].
  unsigned long long* timeline = nullptr;
};

// Shapes the kernel takes: head_dim 16, 32, 64 or 128, at most 16
// query heads per kv head, hidden a multiple of 8 up to 4096 (the residual
// row lives in registers, and phase E reads H partial rows of it in every
// CTA: a small draft's shape), inter a multiple of 8 within the
// shared-memory budget.
bool one_launch_decode_supported(int64_t hidden, int64_t inter, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim);

// CTAs of a launch on the current device: one per SM (0 if a CTA with the
// shared memory these shapes need cannot be resident).
int32_t one_launch_grid(int64_t hidden, int64_t inter, int64_t n_heads, int64_t n_kv_heads,
                        int64_t head_dim);

// Floats of OneLaunchDecodeArgs::partials for a grid of `grid` CTAs.
size_t one_launch_partial_floats(int32_t grid, int64_t n_heads, int64_t n_kv_heads,
                                 int64_t head_dim);

// Warps per output row for a projection of `rows` rows: the most (1, 2, 4,
// 8, 16) that still make no more units (16 / warps rows each) than CTAs,
// so every CTA runs one unit with its loads spread over the most warps.
int32_t one_launch_parts(int64_t rows, int32_t grid);

// Launches the step on `grid` CTAs (one_launch_grid). Aborts on operands
// one_launch_decode_supported refuses.
void one_launch_decode(const OneLaunchDecodeArgs& args, int32_t grid, cudaStream_t stream);

}  // namespace specstack::cuda

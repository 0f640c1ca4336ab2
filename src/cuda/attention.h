// Attention over the paged KV cache (bf16, layout [n_blocks, block_size,
// n_kv_heads, head_dim], every layer its own pair of caches).
//
// paged_attention: one query token at a time against its sequence's
// blocks, online softmax in fp32, the keys split into partitions of
// kPartitionSize slots that run in parallel and are merged (split-K), so a
// long context fills the GPU even at batch 1. The model uses it for decode
// and short prefill chunks (long chunks go to flash_attention.h). Its grid
// depends only on n_tokens and max_context, so a CUDA graph can replay it
// with new data.
// Visibility (CPU twin CpuBackend::attention): query token t of
// sequence s sees the keys in slots [0, token_slot[t]] of s (causal by slot
// order, which is what sparse SpecPrefill positions need) and, with a sliding
// window W > 0, only those with token_pos[t] - W < key_pos.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specstack::cuda {

using bf16 = __nv_bfloat16;

constexpr int32_t kPartitionSize = 256;  // the largest split-K partition (key slots)

// The run kernel's two maths (verify_attention.h): mma.sync (any sm_80+
// image) and warpgroup MMAs (the sm_90a image only).
enum class RunMath { kAuto, kMma, kWgmma };

struct PagedAttentionArgs {
  const bf16* q = nullptr;  // head h of token t at q[t * q_stride + h * head_dim], post-RoPE
  int64_t q_stride = 0;
  const bf16* k_cache = nullptr;            // [n_blocks, block_size, n_kv_heads, head_dim]
  const bf16* v_cache = nullptr;            // [n_blocks, block_size, n_kv_heads, head_dim]
  const int32_t* slot_positions = nullptr;  // [n_blocks, block_size] RoPE position of each slot
  const int32_t* block_tables = nullptr;    // [n_seqs, max_blocks_per_seq] physical block ids
  int32_t max_blocks_per_seq = 0;
  const int32_t* token_seq = nullptr;   // [n_tokens] row of block_tables
  const int32_t* token_slot = nullptr;  // [n_tokens] the query's own slot; keys [0, slot] visible
  const int32_t* token_pos = nullptr;   // [n_tokens] the query's RoPE position
  int32_t n_tokens = 0;
  // Optional [n_tokens] runs (paged_attention_runs): with it, and a head dim
  // run_attention_supported() accepts, the run kernel of verify_attention.h
  // reads each KV tile once per run instead of once per token.
  const int32_t* token_run = nullptr;
  int32_t n_runs = 0;  // runs in token_run (0: unknown); sizes the run kernel's partitions
  // Optional [n_runs] (needs n_runs): the first token of each run, in token
  // order. With it the run kernel's grid spans the runs, not every token: a
  // verify step of 64 runs of 5 rows otherwise launched 4x as many CTAs that
  // only read token_run and exit (~10% of its attention time, H100).
  const int32_t* run_first = nullptr;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;  // 16, 32, 64, 128 or 256
  int32_t block_size = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0 = none
  // Upper bound of token_slot[t] + 1 over the batch; sizes the grid (a graph
  // passes its capacity; tokens with shorter contexts skip empty partitions).
  int32_t max_context = 0;
  // Key slots per partition: a multiple of 32 in [32, kPartitionSize]. Few
  // queries (small-batch decode) use small partitions so enough CTAs run.
  int32_t partition_size = kPartitionSize;
  // The run kernel's partition (a multiple of 64 in [partition_size,
  // kRunMaxPartition]); 0: run_attention_partition_size chooses. Longer
  // partitions than the per-token kernel's amortise its pipeline start and
  // cut the split-K partials it writes.
  int32_t run_partition_size = 0;
  // The run kernel's CTAs per (token, kv head) along the partitions; each
  // loops over every run_grid_parts-th partition, accumulating them into one
  // split-K entry (run_attention_entries). 0: one CTA per partition.
  // A graph is launched for its capacity (max_context), so one CTA per
  // partition means thousands that find no keys at a short context and only
  // occupy the scheduler (H100, 0.5B draft graph of 64 rows at a 1.1K sparse
  // context: 32 partitions' grid, 3968 of 4096 CTAs empty).
  int32_t run_grid_parts = 0;
  // > 0: the run kernel splits each run's keys evenly over this many CTAs per
  // (run, kv head) at run time (flash-decoding): the run's 64-key tiles are
  // dealt out in contiguous ranges of floor or ceil(tiles / run_split), so a
  // short context and a long one both spread over the GPU whatever
  // max_context a graph was captured for. Every CTA writes its
  // partials (an empty range writes max = -inf) and the combine merges all
  // run_split of them. Takes precedence over run_partition_size /
  // run_grid_parts; needs run_split * kRunMaxPartition >= max_context
  // (run_attention_split chooses it). Same math as fixed partitions up to the
  // f32 summation order of the merge.
  int32_t run_split = 0;
  // The run kernel's math: kAuto picks (run_attention_uses_wgmma,
  // verify_attention.h); kMma / kWgmma force one (tests and benchmarks
  // compare them; kWgmma needs run_attention_wgmma_supported).
  RunMath run_math = RunMath::kAuto;
  bf16* out = nullptr;  // head h of token t at out[t * out_stride + h * head_dim]
  int64_t out_stride = 0;
  float* workspace = nullptr;  // paged_attention_workspace_floats(...) floats
  // Programmatic dependent launch (cuda/pdl.h): off when the stream's last
  // operation before this call is a copy rather than a kernel.
  bool pdl = true;
};

// Floats of workspace paged_attention needs for these sizes (run_split: the
// run kernel's run-time split, PagedAttentionArgs::run_split).
size_t paged_attention_workspace_floats(int32_t n_tokens, int32_t n_heads, int32_t head_dim,
                                        int32_t max_context,
                                        int32_t partition_size = kPartitionSize,
                                        int32_t run_split = 0);

// The partition size that gives a step of n_tokens queries enough CTAs to
// fill the GPU (the model's choice; any valid size computes the same).
int32_t paged_attention_partition_size(int32_t n_tokens, int32_t n_kv_heads);

void paged_attention(const PagedAttentionArgs& args, cudaStream_t stream);

// Splits n_tokens queries into runs for the run kernel: consecutive tokens of
// one sequence at consecutive slots, at most kRunMaxQueries / group rows
// each. token_run[t] = the rows of the run starting at t, 0 for a token
// inside a run. Returns the longest run (1: no token shares a run).
int32_t paged_attention_runs(const int32_t* token_seq, const int32_t* token_slot, int32_t n_tokens,
                             int32_t group, int32_t* token_run);

}  // namespace specstack::cuda

// Paged attention for runs of query rows (the verify path): a run is up to
// kRunMaxQueries / group consecutive tokens of one sequence at consecutive
// slots (a speculative sequence's k + 1 verification rows, or a decode row
// as a run of one). One CTA per (run, kv head, partition) reads each K/V
// tile of its partition ONCE for every row of the run and every query head
// of the kv group, and computes QK and PV on the tensor cores
// (mma.m16n8k16, bf16 in, fp32 accumulate) over the (rows x group) x keys
// product. The per-row kernel in attention.cu reads a sequence's KV once per
// row and does the dot products on CUDA cores with shuffles, which at batch
// 32 x 5 verify rows made the verify step ~3x a decode step.
// Same contract, visibility rule, workspace format and merge as
// paged_attention (attention.h; CPU twin CpuBackend::attention): rows of a
// run are causal among themselves through their own slots, sliding windows
// apply per row by position.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention.h"

namespace specstack::cuda {

// Query vectors (rows x heads of the group) one CTA handles: 4 MMA row tiles.
constexpr int32_t kRunMaxQueries = 64;

// The largest partition (key slots) the run kernel takes: a CTA resolves its
// partition's slots into shared memory once.
constexpr int32_t kRunMaxPartition = 1024;

// The run kernel's partition for these args: args.run_partition_size when
// set, else the size measured best for the batch (at least
// args.partition_size, so a workspace sized for that suffices).
int32_t run_attention_partition_size(const PagedAttentionArgs& args);

// The run kernel's partition for a decode graph of n_runs runs: its
// max_context is a capacity, not the step's context (with the rule above, a
// batch-8 graph for 32K contexts replayed at 1.1K ran 2 of its 32 partitions),
// so the choice goes by the CTAs a partition column gives alone.
int32_t run_attention_graph_partition_size(int32_t n_runs, int32_t n_kv_heads,
                                           int32_t partition_size);

// CTAs per (run, kv head) along the partitions for a decode graph of n_runs
// runs (PagedAttentionArgs::run_grid_parts): about 1024 CTAs in all (four
// waves at 2 per SM on 132 SMs), so a long context still spreads over the
// GPU while a short one launches few CTAs that find no keys.
int32_t run_attention_graph_grid_parts(int32_t n_runs, int32_t n_kv_heads);

// CTAs per (run, kv head) along the partitions for an eager step of n_runs
// runs (PagedAttentionArgs::run_grid_parts; the host knows the step's
// contexts, so this aims at one full wave): about kRunEagerCtas CTAs in all,
// at least one per (run, kv head). Each CTA accumulates every G-th partition
// into one split-K entry, so a long context writes G partials a head
// instead of one a partition. H100, attention_bench (us a layer, entries a
// head -> G): 7B shape 64 x 8K 5-row runs 434 (9 partials) -> 377 (G 1: one
// CTA a run head, no combine), decode rows 392 -> 372; 32 x 16K 5 rows
// 432 -> 384 (G 2; G 1 408: half a wave); 8 x 8K 5 rows 63.0 at G 9 vs 66.1
// at G 4 (128 CTAs).
constexpr int32_t kRunEagerCtas = 256;  // two CTAs an SM on a 132-SM part, one wave
int32_t run_attention_eager_grid_parts(int32_t n_runs, int32_t n_kv_heads);

// PagedAttentionArgs::run_split for n_runs runs at contexts up to
// max_context: about kRunSplitCtas CTAs in all when n_runs x n_kv_heads is
// too few to fill the GPU with fixed partitions (batch-1 decode: 4 kv heads
// on the 7B, 2 on the 0.5B), at most kRunSplitMaxParts per (run, kv head)
// (the combine reads every one) and never more than max_context has tiles,
// but always enough that no CTA's range exceeds kRunMaxPartition; 0 (fixed
// partitions) from kRunSplitMaxGroups groups up, or when one CTA would do.
// H100 (session 25, docs/benchmarks.md): a batch-1 decode step's attention
// is latency (ncu: one 64-key tile per CTA on 40 CTAs took 10.7 us, as 4
// CTAs of 256 keys did), so the split pays through fewer serial tiles at
// small batches; 64-128 CTAs per group lost (7B batch 1 at 4K, 0.5B at 8K:
// 3% slower steps), hence the cap; and at 32 groups (7B batch 8) 256 CTAs
// of 1-2 tiles were 3-5% slower steps than main's 96 at a 576-key context
// (7% faster at 4K), hence fixed partitions from 32 groups up until the
// choice accounts for waves and the CTAs PDL makes resident beside them.
constexpr int32_t kRunSplitCtas = 256;      // ~2 CTAs per SM on a 132-SM part
constexpr int32_t kRunSplitMaxParts = 32;   // per (run, kv head), unless ranges need more
constexpr int32_t kRunSplitMaxGroups = 32;  // fixed partitions from here up (see above)
int32_t run_attention_split(int32_t n_runs, int32_t n_kv_heads, int32_t max_context);

// Head dims the run kernel supports (others use the per-row kernel).
bool run_attention_supported(int32_t head_dim);

// Whether the run kernel can take its wgmma math for these args: a device
// running the sm_90a image and an output it can write in bf16 pairs.
bool run_attention_wgmma_supported(const PagedAttentionArgs& args);

// The math RunMath::kAuto takes: wgmma wherever it is supported. H100
// (attention_bench, session 32), us a layer, mma.sync -> wgmma: qwen2.5-7b
// shape 64 x 8K 5-row runs 512 -> 452, decode rows 415 -> 396, 8 x 8K 5 rows
// 77 -> 65, batch-1 decode at 8K 15.8 -> 13.9; qwen2.5-0.5b shape (head dim
// 64) 64 x 8K decode 125 -> 116, 64 x 1K 19.9 -> 18.2, batch 1 10.8 -> 10.4.
bool run_attention_uses_wgmma(const PagedAttentionArgs& args);

// The CTAs along the partitions of a (run, kv head) for n_parts partitions,
// and so the split-K entries each of its tokens' heads gets: n_parts with
// run_split or no run_grid_parts, else min(n_parts, run_grid_parts) (a CTA
// accumulates partitions z, z + entries, ... into entry z). One entry: the
// kernel writes the output itself.
int32_t run_attention_entries(const PagedAttentionArgs& args, int32_t n_parts);

// Launches the run kernel over args.token_run; with more than one entry
// (run_attention_entries) the partials go to the workspace in
// paged_attention's format ([tokens, heads, entries, head_dim + 2]) for its
// combine step.
void launch_run_attention(const PagedAttentionArgs& args, int32_t n_parts, cudaStream_t stream);

}  // namespace specstack::cuda

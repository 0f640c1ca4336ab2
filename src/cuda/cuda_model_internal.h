// CudaModel's per-step metadata and decode-graph records, shared by its
// implementation files (not part of the public interface).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/cuda_model.h"

namespace specstack::cuda {

// A long prefill chunk of one sequence that runs through flash_attention.
struct FlashJob {
  int32_t row0 = 0;    // first row of the chunk in the step
  int32_t n_rows = 0;  // contiguous rows, ascending slots
  int32_t seq = 0;     // row of the block tables
  int32_t n_keys = 0;  // last slot + 1
  // With StepMeta::tail_rows_only: whether the last row wants logits (the
  // last layer then attends for that row alone, else for none of the job's).
  bool last_row_logits = false;
};

// Everything a forward needs about one step. Host fields drive launches;
// device pointers point into one staged int32 buffer copied in one transfer.
struct CudaModel::StepMeta {
  int32_t n_tokens = 0;
  int32_t n_seqs = 0;
  int32_t max_blocks = 0;  // block-table row width
  int32_t n_logit_rows = 0;
  // The last layer past its K/V write runs for the logit rows alone: an eager
  // step where fewer rows want logits than run, and every flash job's logit
  // row (if any) is its last (prefill chunks; not prompt logprobs). Nothing
  // reads the other rows' last-layer outputs, so the step's K/V and logits
  // are those of the whole layer (run_layers).
  bool tail_rows_only = false;
  // Device arrays.
  int32_t* ids = nullptr;           // [n_tokens]
  int32_t* pos = nullptr;           // [n_tokens]
  int32_t* slot_mapping = nullptr;  // [n_tokens] physical slot (block * block_size + offset)
  int32_t* block_tables = nullptr;  // [n_seqs, max_blocks]
  int32_t* logit_rows = nullptr;    // [n_logit_rows]
  // The paged-attention subset: tokens not covered by a flash job.
  int32_t n_paged = 0;
  int32_t paged_begin = -1;  // >= 0: the subset is rows [paged_begin, +n_paged)
  int32_t paged_max_context = 0;
  int32_t paged_partition = 256;  // split-K partition size (paged_attention_partition_size)
  int32_t* paged_rows = nullptr;  // [n_paged] rows of the step (used when paged_begin < 0)
  int32_t* paged_seq = nullptr;   // [n_paged]
  int32_t* paged_slot = nullptr;  // [n_paged]
  int32_t* paged_pos = nullptr;   // [n_paged]
  // [n_paged] runs for the run kernel (paged_attention_runs; a decode row
  // is a run of one); null with the run kernel off.
  int32_t* paged_run = nullptr;
  int32_t paged_n_runs = 0;            // runs in paged_run
  int32_t* paged_run_first = nullptr;  // [paged_n_runs] each run's first row (eager steps only)
  int32_t paged_run_partition = 0;     // the run kernel's partition (0: by the step's context)
  int32_t paged_run_grid_parts = 0;    // the run kernel's CTAs along partitions (0: one each)
  int32_t paged_run_split = 0;         // the run kernel's run-time split (run_attention_split)
  // Flash jobs; their q_slot / q_pos are the step's token arrays at row0.
  int32_t* token_slot = nullptr;  // [n_tokens]
  std::vector<FlashJob> flash;
  // With flash jobs: [flash.size()] each job's seq, and {1, 0} (token_run and
  // run_first of one row alone): a tail layer's logit row attends on the
  // paged kernel as a decode row would.
  int32_t* flash_seq = nullptr;
  int32_t* one_run = nullptr;
  std::vector<int32_t> capture_rows;  // host
  // Where paged attention's split-K partials go (eager or a graph's own).
  float* attn_workspace = nullptr;
  // Capture graphs: every row's queries land here per layer, device to
  // device inside the graph [n_tokens, n_layers, n_heads * head_dim] bf16.
  __nv_bfloat16* capture_device = nullptr;
};

struct CudaModel::Graph {
  int32_t batch = 0;
  cudaGraphExec_t exec = nullptr;
  DeviceBuffer<int32_t> meta;            // this graph's staged metadata
  DeviceBuffer<float> attn_workspace;    // split-K partials at graph capacity
  DeviceBuffer<__nv_bfloat16> captured;  // capture graphs: [batch, n_layers, q_width]
  StepMeta step;                         // device pointers into `meta`
  ~Graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

// Offsets of each section of the staged metadata.
struct MetaOffsets {
  size_t ids, pos, slot_mapping, token_slot, block_tables, logit_rows;
  size_t paged_rows, paged_seq, paged_slot, paged_pos;
  size_t paged_run = 0;        // 0: no runs staged
  int32_t n_runs = 0;          // runs in paged_run (sizes the run kernel's partitions)
  size_t paged_run_first = 0;  // 0: not staged (graph steps)
  size_t flash_seq = 0;        // 0: not staged (no flash jobs)
  size_t one_run = 0;
};

// Fills `meta` (host fields) and `staged` for a batch. With graph_batch > 0
// the layout is padded to that many tokens/sequences and graph_max_blocks
// table columns, every row paged, so it matches the captured graph. With
// run_group > 0 (query heads per kv head) every step with paged rows also
// stages paged_run (runs of a sequence's consecutive rows; decode rows are
// runs of one).
MetaOffsets plan_step(const ForwardBatch& batch, int64_t block_size, bool flash_ok,
                      int32_t run_group, int32_t graph_batch, int32_t graph_max_blocks,
                      int32_t graph_max_context, CudaModel::StepMeta& meta,
                      std::vector<int32_t>& staged);
void set_device_pointers(const MetaOffsets& o, int32_t* base, CudaModel::StepMeta& meta);
// Grows a pinned host buffer to at least `bytes` (contents lost).
void grow_pinned(void** ptr, size_t* capacity, size_t bytes);
// Captured query rows as they come down (bf16) into the f32 the host keeps.
inline void captured_to_f32(const __nv_bfloat16* from, size_t count, float* to) {
  for (size_t i = 0; i < count; ++i) to[i] = __bfloat162float(from[i]);
}

}  // namespace specstack::cuda

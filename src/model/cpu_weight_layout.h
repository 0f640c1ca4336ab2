// The CPU backend's own layout of a model's matrices, chosen once at load:
// Q8_0 matrices in the 16-row panels of the VNNI kernels (AVX-512 VNNI, AVX-VNNI)
// (backend/cpu/quant_panels.h) where this CPU has them, so decode and small
// batches read each weight vector once for 16 rows and every activation row.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "model/weights.h"

namespace specstack {

enum class CpuWeightLayout : uint8_t { kAuto, kAsStored, kPanels };

// lay_out_cpu_weights under kAuto, nothing under kAsStored,
// lay_out_q8_0_panels under kPanels.
int64_t lay_out_cpu_weights(ModelWeights& weights, ThreadPool& pool, CpuWeightLayout layout);

// Lays out every Q8_0 matrix of `weights` that fits (rows a multiple of 16)
// in panels when cpu::quant_panels_enabled(); returns how many. An untied
// embedding table stays as stored (rows are gathered from it); a tied one
// becomes the LM head's panels (its rows are dequantized from them).
// Matrices that were views of weights.mapping have the file pages they were
// read from released (MappedFile::release), so the resident set holds the
// panels, not both.
int64_t lay_out_cpu_weights(ModelWeights& weights, ThreadPool& pool);

// The same without the CPU check: every fitting Q8_0 matrix, whatever the
// isa (the tests lay models out on CPUs without AVX-512, where the panel
// matmul runs its scalar reference).
int64_t lay_out_q8_0_panels(ModelWeights& weights, ThreadPool& pool);

}  // namespace specstack

// Programmatic dependent launch (Hopper): a kernel launched with
// launch_pdl may be scheduled while the kernel before it in the stream (or
// graph) is still running, and waits inside (pdl_begin) until that kernel
// has finished and its writes are visible. A decode step is a chain of ~10
// small kernels per layer; this overlaps each one's launch and block
// scheduling with the previous one's tail (the 0.5B draft's kernels are a
// few microseconds each, so those gaps are a large share of its step).
//
// Rules for a kernel launched this way: call pdl_begin() first, before any
// global memory access and before any early return (a block that exits
// without waiting could let a later kernel's wait pass before an earlier
// kernel is done). Launch with pdl = false after a non-kernel stream
// operation (a copy), where no programmatic edge can be formed.
//
// The one exception: data no kernel of the step writes may be read before
// pdl_begin: the weights (a decode GEMV's L2 prefetch of its first lines,
// issue 11 session 24; the norm weights of rmsnorm / add_rmsnorm) and the
// step's metadata (positions, slot mapping, block tables, runs: uploaded by
// a copy before the step's first kernel, which therefore has no programmatic
// edge to anything before it, and a kernel's pre-wait part runs only once the
// kernel two before it has completed). A decode step is a latency chain of
// small kernels, so what a kernel can read while its predecessor still runs
// comes off the chain (rope's angles, the run attention's slot tables:
// session 30). Never before the wait: anything a kernel of the step writes
// (activations, this step's K/V and slot_positions, FP8 activation scales,
// attention workspaces).
#pragma once

#include <cuda_runtime.h>

#include "cuda/cuda_check.h"

namespace specstack::cuda {

__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // Every block has started, so the next kernel may be scheduled now (it
  // waits in its own pdl_begin).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Asks L2 for the line holding p; no register result, no ordering.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                cudaStream_t stream, bool pdl, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  SS_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace specstack::cuda

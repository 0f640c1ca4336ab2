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
// The one exception: prefetch_l2 of data no kernel of the step writes (the
// weights) may come before pdl_begin. A decode GEMV's blocks become resident
// while the kernel before it (attention, rope, a norm: a few us each on a
// handful of SMs) still runs, so their first weight lines stream into L2
// meanwhile instead of after the wait (issue 11, session 24).
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

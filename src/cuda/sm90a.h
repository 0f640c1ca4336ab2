// Whether this process's GPU runs the sm_90a image of the kernels: the
// warpgroup-MMA kernels (flash_attention_hopper.cu, the run kernel's
// WgmmaRun) exist only there. False on other GPUs and in builds for another
// architecture (CMAKE_CUDA_ARCHITECTURES), where those kernels are empty.
#pragma once

namespace specstack::cuda {

// Cached per process (one device kind per process).
bool device_runs_sm90a();

}  // namespace specstack::cuda

// device_runs_sm90a (sm90a.h): a device symbol that only the sm_90a image
// sets, read back once.
#include <cuda_runtime.h>

#include "cuda/sm90a.h"

namespace specstack::cuda {
namespace {

// 1 in the sm_90a image, 0 in any other image. Never written.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ int image_is_sm90a = 1;
#else
__device__ int image_is_sm90a = 0;
#endif

}  // namespace

bool device_runs_sm90a() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0, built = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (major != 9 || minor != 0) return false;
    if (cudaMemcpyFromSymbol(&built, image_is_sm90a, sizeof(built)) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return built == 1;
  }();
  return ok;
}

}  // namespace specstack::cuda

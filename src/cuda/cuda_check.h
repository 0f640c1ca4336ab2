// Error checking for CUDA runtime and cuBLAS calls. A failing call is a
// programming or environment error on the serving path, so it aborts with the
// call, the error name and the location (like SS_CHECK); start-up paths that
// must report a clean error use cuda_error_message() instead.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace specstack::cuda {

[[noreturn]] void fail_cuda(const char* expr, const char* error, const char* file, int line);
const char* cublas_status_name(cublasStatus_t status);

// "no CUDA device" style text for a runtime error code.
std::string cuda_error_message(cudaError_t error);

// True when at least one CUDA device can be used (tests skip otherwise).
bool cuda_device_available();

}  // namespace specstack::cuda

#define SS_CUDA_CHECK(expr)                                                                      \
  do {                                                                                           \
    cudaError_t ss_cuda_err_ = (expr);                                                           \
    if (ss_cuda_err_ != cudaSuccess) {                                                           \
      ::specstack::cuda::fail_cuda(#expr, cudaGetErrorString(ss_cuda_err_), __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define SS_CUDA_CHECK_LAUNCH() SS_CUDA_CHECK(cudaGetLastError())

#define SS_CUBLAS_CHECK(expr)                                                                   \
  do {                                                                                          \
    cublasStatus_t ss_cublas_st_ = (expr);                                                      \
    if (ss_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                               \
      ::specstack::cuda::fail_cuda(#expr, ::specstack::cuda::cublas_status_name(ss_cublas_st_), \
                                   __FILE__, __LINE__);                                         \
    }                                                                                           \
  } while (0)

// Every CUDA runtime call goes through SPW_CUDA, so a failure becomes one
// line naming the call as written and CUDA's reason:
//   SPW_CUDA(cudaMalloc(&p, n))  ->  "cudaMalloc(&p, n): out of memory"
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "base/log.h"
#include "base/status.h"

// The runtime's last-error slot is cleared too, so a later
// cudaGetLastError() after a kernel launch does not report this failure again.
#define SPW_CUDA(call)                                                          \
  do {                                                                          \
    const cudaError_t spw_cuda_status_ = (call);                                \
    if (spw_cuda_status_ != cudaSuccess) {                                      \
      (void)cudaGetLastError();                                                 \
      throw ::spillway::Error(#call, cudaGetErrorString(spw_cuda_status_));     \
    }                                                                           \
  } while (0)

// For destructors, which must not throw: the failure is logged instead.
#define SPW_CUDA_WARN(call)                                                     \
  do {                                                                          \
    const cudaError_t spw_cuda_status_ = (call);                                \
    if (spw_cuda_status_ != cudaSuccess) {                                      \
      (void)cudaGetLastError();                                                 \
      ::spillway::log_warn(std::string(#call) + ": " +                          \
                           cudaGetErrorString(spw_cuda_status_));               \
    }                                                                           \
  } while (0)

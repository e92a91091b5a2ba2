// Makes a GPU current for the calls that act on "the current device"
// (cudaMalloc, stream and event creation) and restores the previous one, so
// a process driving several GPUs from one thread gets each call right.
#pragma once

#include "device/cuda/cuda_check.h"

namespace spillway {

class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int ordinal) {
    SPW_CUDA(cudaGetDevice(&previous_));
    if (previous_ != ordinal) SPW_CUDA(cudaSetDevice(ordinal));
  }
  ~CudaDeviceGuard() { SPW_CUDA_WARN(cudaSetDevice(previous_)); }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace spillway

// Programmatic dependent launch (compute capability 9.0 and up): a kernel
// launched with launch_dependent() may start while the kernel before it in
// its stream still runs, and do what needs nothing of that kernel (load
// its weights) before waiting for it. A decode pass is a chain of short
// kernels each reading a few megabytes; launched one after the other, every
// kernel's ramp-up and tail leaves the memory idle.
//
// What a kernel launched this way must do:
//   - call prior_grids_wait() before it touches memory that an earlier
//     kernel of the stream writes, or writes memory an earlier kernel reads
//     (only read-only inputs, such as weights, before it), and in every
//     thread before it returns, so that its completion implies the
//     completion of the kernels before it;
//   - call dependents_may_start() where the next kernel may begin to launch
//     (its own wait still waits for this kernel's completion and memory).
// Both compile to nothing below compute capability 9.0, and the launch is a
// plain one on such a device.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "device/cuda/cuda_check.h"

namespace spillway {

__device__ __forceinline__ void prior_grids_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void dependents_may_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Whether the current device takes dependent launches (its compute
// capability is 9.0 or more; asked of the driver once per device) and
// SPILLWAY_DEPENDENT_LAUNCH=0 does not turn them off (to measure them, or
// to rule them out when hunting a race).
bool dependent_launch_supported();

// kernel<<<grid, block, shared, stream>>>(args...), allowed to overlap the
// kernel before it in the stream where the device supports it. The kernel
// must keep the contract above.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute overlap[1];
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = overlap;
  config.numAttrs = dependent_launch_supported() ? 1 : 0;
  SPW_CUDA(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace spillway

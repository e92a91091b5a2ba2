// Memory spaces of the CUDA backend. Each reserves its whole budget once
// (cudaMalloc for device memory, cudaHostAlloc for pinned host memory) and
// serves requests from it with an Arena, so allocating inside a training
// step never calls into the driver or synchronises the device.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/memory_space.h"

namespace spillway {

enum class CudaPoolKind { device, pinned_host };

// A space whose budget is `capacity` rounded down to MemorySpace::kAlignment,
// all of it reserved now on GPU `ordinal`.
std::unique_ptr<MemorySpace> make_cuda_pool_space(std::string name, CudaPoolKind kind,
                                                  int ordinal, uint64_t capacity);

}  // namespace spillway

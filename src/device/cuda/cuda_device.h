// The CUDA backend's device: one GPU, a device pool and a pinned host pool
// reserved up front, four non-blocking streams, and copies that are
// cudaMemcpyAsync (any direction; unified addressing tells which).
#pragma once

#include <string>

#include <cstdint>
#include <memory>

#include "device/cuda/cuda_stream.h"
#include "device/device.h"

namespace spillway {

// Budgets left at MemorySpace::kUnlimited take what the machine can give:
// this share of the GPU's free memory (the rest stays for cuBLAS and cuDNN
// workspaces, NCCL buffers and the CUDA context) ...
inline constexpr double kDefaultDevicePoolShareOfFree = 0.9;
// ... and this much pinned host memory, at most half the host's RAM: pinning
// is slow (docs/performance.md), so a large default would cost every start
// seconds; a caller that knows its host peak (the planner) passes it instead.
inline constexpr uint64_t kDefaultPinnedPoolBytes = 8ull << 30;

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, uint64_t device_budget, uint64_t host_budget);

  int ordinal() const { return ordinal_; }
  CudaStream& cuda_stream(StreamKind kind) { return as_cuda_stream(stream(kind)); }
  std::unique_ptr<Event> new_event(bool timed = false) override;
  void copy_async(void* dst, const void* src, uint64_t bytes, Stream& stream) override;
  void zero_async(void* dst, uint64_t bytes, Stream& stream) override;

 private:
  int ordinal_;
};

// The number of usable GPUs; 0 when there is no driver or no GPU.
int cuda_device_count();
// GPU `ordinal`'s name ("NVIDIA H100 80GB HBM3"): which rates the planner uses.
std::string cuda_device_name(int ordinal);

// The device pool a budget left unset gets: kDefaultDevicePoolShareOfFree of
// what is free now.
uint64_t cuda_default_device_budget(int ordinal);

// Makes GPU `ordinal` this thread's current device: where kernels and
// NCCL's calls made without a guard run.
void set_current_cuda_device(int ordinal);

std::unique_ptr<Device> make_cuda_device(int ordinal,
                                         uint64_t device_budget = MemorySpace::kUnlimited,
                                         uint64_t host_budget = MemorySpace::kUnlimited);

}  // namespace spillway

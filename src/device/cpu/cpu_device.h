// The CPU backend's device. Its "device" memory is ordinary host memory under
// a budget of its own, accounted apart from its "pinned host" memory, so the
// planner's placement and peak accounting can be tested on a machine without
// a GPU. Streams are CpuStreams; copies are memcpys run on a stream.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "device/cpu/cpu_event.h"
#include "device/cpu/cpu_stream.h"
#include "device/device.h"

namespace spillway {

class CpuDevice final : public Device {
 public:
  // Budgets in bytes; MemorySpace::kUnlimited for none.
  CpuDevice(uint64_t device_budget, uint64_t host_budget);

  CpuStream& cpu_stream(StreamKind kind) { return as_cpu_stream(stream(kind)); }
  std::unique_ptr<Event> new_event(bool timed = false) override;
  void copy_async(void* dst, const void* src, uint64_t bytes, Stream& stream) override;
  void zero_async(void* dst, uint64_t bytes, Stream& stream) override;
};

std::unique_ptr<Device> make_cpu_device(uint64_t device_budget = MemorySpace::kUnlimited,
                                        uint64_t host_budget = MemorySpace::kUnlimited);

// A space served from the host heap (aligned_alloc), for the CPU device and
// for anything else that needs budgeted host memory.
std::unique_ptr<MemorySpace> make_host_heap_space(std::string name, uint64_t budget);

}  // namespace spillway

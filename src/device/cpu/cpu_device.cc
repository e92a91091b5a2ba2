#include "device/cpu/cpu_device.h"

#include <cstdlib>
#include <cstring>
#include <map>

#include "base/status.h"

namespace spillway {

namespace {

// Keeps freed blocks for reuse by size. A training step allocates the same
// sizes in the same order every time; without the cache each large block
// would go back to the kernel and come back as fresh pages, and the page
// faults of touching them cost more than the small ops that use them.
class HostHeapBacking final : public MemoryBacking {
 public:
  explicit HostHeapBacking(std::string space_name) : space_name_(std::move(space_name)) {}
  ~HostHeapBacking() override {
    for (auto& [bytes, ptr] : cached_) std::free(ptr);
  }

  void* allocate(uint64_t bytes, std::string_view what) override {
    auto it = cached_.find(bytes);
    if (it != cached_.end()) {
      void* ptr = it->second;
      cached_.erase(it);
      cached_bytes_ -= bytes;
      return ptr;
    }
    void* ptr = std::aligned_alloc(MemorySpace::kAlignment, bytes);
    if (!ptr && cached_bytes_ > 0) {  // the cache holds the memory: give it back and retry
      for (auto& [size, p] : cached_) std::free(p);
      cached_.clear();
      cached_bytes_ = 0;
      ptr = std::aligned_alloc(MemorySpace::kAlignment, bytes);
    }
    SPW_CHECK(ptr != nullptr, space_name_, "host out of memory allocating '", what, "' of ",
              format_bytes(bytes));
    return ptr;
  }
  void free(void* ptr, uint64_t bytes) override {
    cached_.emplace(bytes, ptr);
    cached_bytes_ += bytes;
  }

 private:
  std::string space_name_;
  std::multimap<uint64_t, void*> cached_;  // size -> block
  uint64_t cached_bytes_ = 0;
};

Device::Streams make_cpu_streams() {
  Device::Streams streams;
  for (int k = 0; k < kStreamKindCount; ++k) {
    streams[k] = std::make_unique<CpuStream>("cpu:" +
                                             std::string(stream_kind_name(static_cast<StreamKind>(k))));
  }
  return streams;
}

}  // namespace

std::unique_ptr<MemorySpace> make_host_heap_space(std::string name, uint64_t budget) {
  auto backing = std::make_unique<HostHeapBacking>(name);
  return std::make_unique<MemorySpace>(std::move(name), budget, std::move(backing));
}

CpuDevice::CpuDevice(uint64_t device_budget, uint64_t host_budget)
    : Device("cpu", make_host_heap_space("cpu:device", device_budget),
             make_host_heap_space("cpu:pinned_host", host_budget), make_cpu_streams()) {}

std::unique_ptr<Event> CpuDevice::new_event(bool) { return std::make_unique<CpuEvent>(); }

void CpuDevice::copy_async(void* dst, const void* src, uint64_t bytes, Stream& stream) {
  CpuStream& cpu = as_cpu_stream(stream);
  if (bytes == 0) return;
  SPW_CHECK(dst != nullptr && src != nullptr, cpu.name(), "copy of ", format_bytes(bytes),
            " with a null pointer");
  cpu.enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

void CpuDevice::zero_async(void* dst, uint64_t bytes, Stream& stream) {
  CpuStream& cpu = as_cpu_stream(stream);
  if (bytes == 0) return;
  SPW_CHECK(dst != nullptr, cpu.name(), "zeroing ", format_bytes(bytes), " at a null pointer");
  cpu.enqueue([dst, bytes] { std::memset(dst, 0, bytes); });
}

std::unique_ptr<Device> make_cpu_device(uint64_t device_budget, uint64_t host_budget) {
  return std::make_unique<CpuDevice>(device_budget, host_budget);
}

}  // namespace spillway

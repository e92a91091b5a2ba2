// One compute device as the step program sees it: two memory spaces with
// budgets (the device's own memory and pinned host memory), one stream per
// kind of work, events to order the streams, and asynchronous copies.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "device/event.h"
#include "device/memory_space.h"
#include "device/stream.h"

namespace spillway {

// Compute, host→device copies, device→host copies and communication each get
// their own stream, so copies and collectives overlap compute.
enum class StreamKind { compute, h2d, d2h, comm };
inline constexpr int kStreamKindCount = 4;
std::string_view stream_kind_name(StreamKind kind);

class Device {
 public:
  using Streams = std::array<std::unique_ptr<Stream>, kStreamKindCount>;

  // Finishes the work on every stream before the memory it may touch goes.
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const { return name_; }
  MemorySpace& device_memory() { return *device_memory_; }
  MemorySpace& host_memory() { return *host_memory_; }  // pinned on a GPU
  Stream& stream(StreamKind kind) { return *streams_[static_cast<int>(kind)]; }

  // `timed`: the event can measure time (Event::seconds_since), which costs
  // a little more to record.
  virtual std::unique_ptr<Event> new_event(bool timed = false) = 0;
  // Copies `bytes` from `src` to `dst` in `stream`'s order; either pointer may
  // be in either memory space. `stream` must belong to this device's kind.
  virtual void copy_async(void* dst, const void* src, uint64_t bytes, Stream& stream) = 0;
  // Zeroes `bytes` at `dst` (either memory space) in `stream`'s order.
  virtual void zero_async(void* dst, uint64_t bytes, Stream& stream) = 0;

  // Waits for every stream; rethrows the first error any of them reports.
  void synchronize();
  // The same from a destructor, which must not throw: the error is logged,
  // naming `owner`.
  void synchronize_at_end(std::string_view owner) noexcept;

 protected:
  Device(std::string name, std::unique_ptr<MemorySpace> device_memory,
         std::unique_ptr<MemorySpace> host_memory, Streams streams);

 private:
  std::string name_;
  // Declared before the streams so they outlive them.
  std::unique_ptr<MemorySpace> device_memory_;
  std::unique_ptr<MemorySpace> host_memory_;
  Streams streams_;
};

}  // namespace spillway

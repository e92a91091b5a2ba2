#include "infer/cuda/device_requests.h"

namespace spillway::infer {

uint64_t DeviceRequests::bytes() const {
  uint64_t total = 0;
  for (const Request& r : requests_) total += MemorySpace::accounted_bytes(r.bytes);
  return total;
}

void DeviceRequests::allocate(MemorySpace& memory) {
  for (Request& r : requests_) r.set(memory.allocate(r.bytes, r.what));
  requests_.clear();
}

}  // namespace spillway::infer
